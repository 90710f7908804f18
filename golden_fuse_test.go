package dedup_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/testclock"
)

var updateFuseGolden = flag.Bool("update-fuse", false, "rewrite testdata/state-fuse-v1")

// goldenFuseDir is a probabilistic state directory written with Filter
// fuse: three generations committed and snapshotted, the first two sealed
// into fuse filters, the third blocked (late keys in a fuse filter's
// overflow are pinned by filter's golden encodings). It pins the fuse encoding inside a real state directory: a
// later build must open it from its snapshot, restore the fuse filters and
// find every key. Rewrite with go test -run TestGoldenFuseState
// -update-fuse.
const goldenFuseDir = "testdata/state-fuse-v1"

var goldenFuseT0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

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
		writeGoldenState(t, goldenFuseT0, func(clk *testclock.Clock) Options { return goldenFuseOptions(goldenFuseDir, clk) },
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
	clk := testclock.New(goldenFuseT0.Add(3*time.Hour + time.Minute))
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
