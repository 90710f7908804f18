package dedup_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

// goldenExact2Dir is an exact-mode state directory written by main at
// 51d9306 (exact store format 2: its own commit log, ingested key tables)
// with goldenExact2Write: the first generation's keys in ingested key
// tables, the second's in the commit log's segment, and two snapshots. A
// later build must open it and find every key and the checkpoint, and keep
// them across a reopen, so that a change of the store's or the snapshot's
// format is caught. Rewrite it only with a build that writes the same
// formats: DEDUP_WRITE_GOLDEN_EXACT2=dir.
const goldenExact2Dir = "testdata/state-exact-format2"

// goldenExact2Write writes the golden directory: a generation committed,
// snapshotted and closed; reopened (which flushes the commit log's segment
// into key tables), a second generation committed an hour later and
// closed (a final snapshot; the store does not flush at Close, so those
// keys stay in the segment).
func goldenExact2Write(t *testing.T, dir string) {
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

func TestGoldenExactFormat2State(t *testing.T) {
	if dir := os.Getenv("DEDUP_WRITE_GOLDEN_EXACT2"); dir != "" {
		goldenExact2Write(t, dir)
		return
	}
	// Open it, commit a new key, then open it again: every key each time,
	// restored from the snapshot.
	checkGoldenExact(t, goldenExact2Dir, RestoredSnapshot)
}
