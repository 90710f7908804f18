package dedup_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

// goldenExactDir is an exact-mode state directory written by main at
// 81c0eae, before the exact store had its own commit log (store format
// 1, its keys in Pebble's write-ahead log): a generation committed and
// snapshotted, a second committed an hour later, then closed (a final
// snapshot). A later build must open it, upgrading the store, and find every key, the
// checkpoint too, and keep them across a reopen. It cannot be rewritten
// by this build (which writes format 2); see goldenExactWrite.
const goldenExactDir = "testdata/state-exact-format1"

var goldenExactT0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func goldenExactOptions(dir string, clk *testclock.Clock) Options {
	return Options{Dir: dir, Window: 4 * time.Hour, Generations: 4, Shards: 2, ExpectedRate: 1, Now: clk.Now}
}

func goldenExactKey(g, i int) string { return fmt.Sprintf("golden-exact-g%d-k%d", g, i) }

var goldenExactCounts = []int{500, 700}

// goldenExactWrite writes the golden directory (run by main's code).
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

func TestGoldenExactFormat1State(t *testing.T) {
	if dir := os.Getenv("DEDUP_WRITE_GOLDEN_EXACT"); dir != "" {
		goldenExactWrite(t, dir)
		return
	}
	checkGoldenExact(t, goldenExactDir, "")
}

// checkGoldenExact opens a copy of the golden exact-mode state src
// (goldenExactCounts keys, checkpoint cp-1), commits a new key, and opens
// it again: every key and the checkpoint each time, and, unless
// restoredFrom is "", restored from there.
func checkGoldenExact(t *testing.T, src, restoredFrom string) {
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
		if got := e.Stats().RestoredFrom; restoredFrom != "" && got != restoredFrom {
			t.Fatalf("open %d: restored from %q, want %q", round, got, restoredFrom)
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
}
