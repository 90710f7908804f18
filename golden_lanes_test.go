package dedup_test

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

var updateGolden = flag.Bool("update-lanes", false, "rewrite testdata/state-interleaved-v1")

// goldenLanesDir is a probabilistic state directory written with Filter
// interleaved: two generations committed and snapshotted, the second with
// an overflowed lane. It pins the lane encoding inside a real state
// directory: a later build must open it from its snapshot and find every
// key. Rewrite with go test -run TestGoldenInterleavedState -update-lanes.
const goldenLanesDir = "testdata/state-interleaved-v1"

var goldenLanesT0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

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
		writeGoldenState(t, goldenLanesT0, func(clk *testclock.Clock) Options { return goldenLanesOptions(goldenLanesDir, clk) },
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
	clk := testclock.New(goldenLanesT0.Add(3 * time.Hour))
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
