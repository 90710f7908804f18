package dedup_test

// Golden state directories: states written by earlier builds (or by this
// one, for the newest formats), which every later build must open with
// every key it holds still a Duplicate, so that a change of the store's,
// the snapshot's or a filter's format is caught.

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/testclock"
)

// goldenExactDir is an exact-mode state directory written by a build of
// store format 1 (its keys in Pebble's write-ahead log): a generation
// committed and snapshotted, a second committed an hour later, then closed
// (a final snapshot). It cannot be rewritten by this build; see
// goldenExactWrite.
const goldenExactDir = "testdata/state-exact-format1"

// goldenExact2Dir is an exact-mode state directory written by a build of
// store format 2 (its own commit log, ingested key tables) with
// goldenExact3Write: the first generation's keys in ingested key tables,
// the second's in the commit log's segment, and two snapshots. It cannot
// be rewritten by this build.
const goldenExact2Dir = "testdata/state-exact-format2"

// goldenExact3Dir is the same as goldenExact2Dir in store format 3 (keyed
// fingerprints instead of keys), written by this build: rewrite it only
// with a build that writes the same formats, DEDUP_WRITE_GOLDEN_EXACT3=dir.
const goldenExact3Dir = "testdata/state-exact-format3"

var goldenExactT0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func goldenExactOptions(dir string, clk *testclock.Clock) Options {
	return Options{Dir: dir, Window: 4 * time.Hour, Generations: 4, Shards: 2, ExpectedRate: 1, Now: clk.Now}
}

func goldenExactKey(g, i int) string { return fmt.Sprintf("golden-exact-g%d-k%d", g, i) }

var goldenExactCounts = []int{500, 700}

// goldenExactWrite wrote goldenExactDir (run by a build of format 1).
func goldenExactWrite(t *testing.T, dir string) {
	clk := testclock.New(goldenExactT0)
	e := openT(t, goldenExactOptions(dir, clk))
	for g, n := range goldenExactCounts {
		for i := range n {
			mustObserve(t, e, goldenExactKey(g, i), New)
		}
		mustCommit(t, e, fmt.Sprintf("cp-%d", g))
		if g == 0 {
			if err := e.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Hour)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// goldenExact3Write writes goldenExact3Dir (goldenExact2Dir was written
// the same way by a build of format 2): a generation committed,
// snapshotted and closed; reopened (which flushes the commit log's segment
// into key tables), a second generation committed an hour later and
// closed (a final snapshot; the store does not flush at Close, so those
// keys stay in the segment).
func goldenExact3Write(t *testing.T, dir string) {
	clk := testclock.New(goldenExactT0)
	for g, n := range goldenExactCounts {
		e := openT(t, goldenExactOptions(dir, clk))
		for i := range n {
			mustObserve(t, e, goldenExactKey(g, i), New)
		}
		mustCommit(t, e, fmt.Sprintf("cp-%d", g))
		if err := e.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
}

// TestGoldenExactStates opens the exact-mode states of every store format.
// Those of formats 1 and 2 are upgraded: their filters, which hashed keys,
// are rebuilt from the store's fingerprints on the first open, and come
// from the snapshot the first open's Close wrote on the second; after the
// first open no key they hold is left in any file of the directory.
func TestGoldenExactStates(t *testing.T) {
	if dir := os.Getenv("DEDUP_WRITE_GOLDEN_EXACT3"); dir != "" {
		goldenExact3Write(t, dir)
		return
	}
	for _, c := range []struct {
		name string
		dir  string
		from [2]string // where each of two opens restores from
	}{
		{"format1", goldenExactDir, [2]string{RestoredStore, RestoredSnapshot}},
		{"format2", goldenExact2Dir, [2]string{RestoredStore, RestoredSnapshot}},
		{"format3", goldenExact3Dir, [2]string{RestoredSnapshot, RestoredSnapshot}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := checkGoldenExact(t, c.dir, c.from)
			if c.name != "format1" { // format 1's keys went through Pebble's WAL files, which Pebble recycles
				checkNoKeysAtRest(t, dir)
			}
		})
	}
}

// checkGoldenExact opens a copy of the golden exact-mode state src
// (goldenExactCounts keys, checkpoint cp-1), commits a new key, and opens
// it again: every key and the checkpoint each time, restored from
// from[round]. It returns the copy's directory.
func checkGoldenExact(t *testing.T, src string, from [2]string) string {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(goldenExactT0.Add(3 * time.Hour))
	for round, cp := range []string{"cp-1", "cp-new"} {
		e := openT(t, goldenExactOptions(dir, clk))
		if got := string(e.Checkpoint()); got != cp {
			t.Fatalf("open %d: checkpoint %q, want %q", round, got, cp)
		}
		if got := e.Stats().RestoredFrom; got != from[round] {
			t.Fatalf("open %d: restored from %q, want %q (problems %q)", round, got, from[round], e.Stats().RestoreProblems)
		}
		for g, n := range goldenExactCounts {
			for i := range n {
				mustObserve(t, e, goldenExactKey(g, i), Duplicate)
			}
		}
		if round == 0 {
			mustObserve(t, e, "golden-exact-new", New)
			mustCommit(t, e, "cp-new")
		} else {
			mustObserve(t, e, "golden-exact-new", Duplicate)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkNoKeysAtRest fails if any file under dir holds one of the golden
// exact keys.
func checkNoKeysAtRest(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, k := range []string{"golden-exact-g", "golden-exact-new"} {
			if i := bytes.Index(b, []byte(k)); i >= 0 {
				t.Errorf("%s holds a key at byte %d: %q", path, i, b[i:min(len(b), i+24)])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var updateFuseGolden = flag.Bool("update-fuse", false, "rewrite testdata/state-fuse-v1")

// goldenFuseDir is a probabilistic state directory written with Filter
// fuse: three generations committed and snapshotted, the first two sealed
// into fuse filters, the third blocked (late keys in a fuse filter's
// overflow are pinned by filter's golden encodings). It pins the fuse
// encoding inside a real state directory: a later build must open it from
// its snapshot, restore the fuse filters and find every key. Rewrite with
// go test -run TestGoldenFuseState -update-fuse.
const goldenFuseDir = "testdata/state-fuse-v1"

func goldenFuseOptions(dir string, clk *testclock.Clock) Options {
	return Options{Dir: dir, Filter: "fuse", Probabilistic: true, Window: 4 * time.Hour,
		Generations: 4, Shards: 2, ExpectedRate: 0.05, Now: clk.Now, SnapshotInterval: -1}
}

func goldenFuseKey(g, i int) []byte { return fmt.Appendf(nil, "golden-fuse-g%d-k%d", g, i) }

var goldenFuseCounts = []int{300, 2000, 500}

func TestGoldenFuseState(t *testing.T) {
	if *updateFuseGolden {
		if err := os.RemoveAll(goldenFuseDir); err != nil {
			t.Fatal(err)
		}
		writeGoldenState(t, goldenExactT0, func(clk *testclock.Clock) Options { return goldenFuseOptions(goldenFuseDir, clk) },
			goldenFuseCounts, goldenFuseKey)
		// The newest generation's spool is never read again.
		spool := filepath.Join(goldenFuseDir, SpoolDir)
		if err := os.RemoveAll(spool); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(goldenFuseDir)); err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(goldenExactT0.Add(3*time.Hour + time.Minute))
	e := openT(t, goldenFuseOptions(dir, clk))
	st := e.Stats()
	if st.RestoredFrom != "snapshot" {
		t.Fatalf("restored from %q, want the snapshot", st.RestoredFrom)
	}
	fuses := 0
	for _, kinds := range GenerationKinds(e) {
		for _, k := range kinds {
			if k == filter.Fuse {
				fuses++
			}
		}
	}
	if fuses != 4 {
		t.Fatalf("%d fuse filters restored (%v), want 2 generations x 2 shards", fuses, GenerationKinds(e))
	}
	for g, n := range goldenFuseCounts {
		for i := range n {
			mustObserve(t, e, string(goldenFuseKey(g, i)), Duplicate)
		}
	}
}

var updateGolden = flag.Bool("update-lanes", false, "rewrite testdata/state-interleaved-v1")

// goldenLanesDir is a probabilistic state directory written with Filter
// interleaved: two generations committed and snapshotted, the second with
// an overflowed lane. It pins the lane encoding inside a real state
// directory: a later build must open it from its snapshot and find every
// key. Rewrite with go test -run TestGoldenInterleavedState -update-lanes.
const goldenLanesDir = "testdata/state-interleaved-v1"

func goldenLanesOptions(dir string, clk *testclock.Clock) Options {
	return Options{Dir: dir, Filter: "interleaved", Probabilistic: true, Window: 4 * time.Hour,
		Generations: 4, Shards: 2, ExpectedRate: 0.05, Now: clk.Now}
}

func goldenLanesKey(g, i int) []byte { return fmt.Appendf(nil, "golden-g%d-k%d", g, i) }

// goldenLanesCounts are the keys per generation: the second outgrows its
// lane (sized for about 180 per shard) and overflows.
var goldenLanesCounts = []int{300, 2000}

func TestGoldenInterleavedState(t *testing.T) {
	if *updateGolden {
		if err := os.RemoveAll(goldenLanesDir); err != nil {
			t.Fatal(err)
		}
		writeGoldenState(t, goldenExactT0, func(clk *testclock.Clock) Options { return goldenLanesOptions(goldenLanesDir, clk) },
			goldenLanesCounts, goldenLanesKey)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(goldenLanesDir)); err != nil {
		t.Fatal(err)
	}
	var size int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, _ error) error {
		if info, err := d.Info(); err == nil && !d.IsDir() {
			size += info.Size()
		}
		return nil
	})
	clk := testclock.New(goldenExactT0.Add(3 * time.Hour))
	e := openT(t, goldenLanesOptions(dir, clk))
	st := e.Stats()
	t.Logf("golden state: %d bytes on disk, restored from %q, %d keys", size, st.RestoredFrom, st.RestoredKeys)
	if st.RestoredFrom != "snapshot" {
		t.Fatalf("restored from %q, want the snapshot", st.RestoredFrom)
	}
	for g, n := range goldenLanesCounts {
		for i := range n {
			mustObserve(t, e, string(goldenLanesKey(g, i)), Duplicate)
		}
	}
}

// writeGoldenState writes a golden probabilistic state directory: for
// each generation g, counts[g] keys key(g, i) observed and committed
// (checkpoint cp-g), then an hour on the clock; a snapshot and Close at
// the end.
func writeGoldenState(t *testing.T, t0 time.Time, opts func(*testclock.Clock) Options, counts []int, key func(g, i int) []byte) {
	t.Helper()
	clk := testclock.New(t0)
	e, err := Open(opts(clk))
	if err != nil {
		t.Fatal(err)
	}
	for g, n := range counts {
		for i := range n {
			// New, or Duplicate for a false positive: either way the key
			// is held from now on.
			if _, err := e.Observe(key(g, i)); err != nil {
				t.Fatal(err)
			}
		}
		mustCommit(t, e, fmt.Sprintf("cp-%d", g))
		clk.Advance(time.Hour)
	}
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
