package dedup_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// TestSnapshotIntervalDefault: with a state directory SnapshotInterval
// defaults to Window/Generations, within [1m, 1h]; in memory there is
// nothing to restore from, so no snapshots; a negative value turns
// periodic snapshots off and is kept.
func TestSnapshotIntervalDefault(t *testing.T) {
	for _, tc := range []struct {
		o    dedup.Options
		want time.Duration
	}{
		{dedup.Options{Dir: "d"}, 15 * time.Minute},
		{dedup.Options{Dir: "d", Window: 24 * time.Hour}, time.Hour},
		{dedup.Options{Dir: "d", Window: 10 * time.Second}, time.Minute},
		{dedup.Options{Dir: "d", Window: 40 * time.Minute, Generations: 8}, 5 * time.Minute},
		{dedup.Options{Dir: "d", SnapshotInterval: 7 * time.Second}, 7 * time.Second},
		{dedup.Options{Dir: "d", SnapshotInterval: -1}, -1},
		{dedup.Options{}, 0},
	} {
		o := tc.o
		if got := o.EnsureDefaults().SnapshotInterval; got != tc.want {
			t.Errorf("%+v: SnapshotInterval %v, want %v", tc.o, got, tc.want)
		}
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", tc.o, err)
		}
	}
}

// TestCloseWritesSnapshot: with a state directory, Close writes a snapshot
// so that the next Open restores from it instead of rebuilding the
// filters; SnapshotInterval < 0 turns that off too.
func TestCloseWritesSnapshot(t *testing.T) {
	for _, tc := range []struct {
		prob     bool
		interval time.Duration
		want     string
	}{
		{false, 0, dedup.RestoredSnapshot},
		{true, 0, dedup.RestoredSnapshot},
		{false, -1, dedup.RestoredStore},
		{true, -1, dedup.RestoredLog},
	} {
		t.Run(fmt.Sprintf("prob=%v,interval=%v", tc.prob, tc.interval), func(t *testing.T) {
			o := dedup.Options{Dir: t.TempDir(), Probabilistic: tc.prob, SnapshotInterval: tc.interval}
			e := mustOpenOpts(t, o)
			for i := 0; i < 100; i++ {
				wantVerdict(t, e, fmt.Sprint(i), dedup.New)
			}
			if err := e.Commit(nil); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = mustOpenOpts(t, o)
			defer e.Close()
			st := e.Stats()
			if st.RestoredFrom != tc.want || st.RestoredKeys != 100 {
				t.Fatalf("restored %d keys from %q, want 100 from %q", st.RestoredKeys, st.RestoredFrom, tc.want)
			}
			wantVerdict(t, e, "7", dedup.Duplicate)
		})
	}
}
