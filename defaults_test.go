package dedup_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/diskuse"
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
		if got := o.WithDefaults().SnapshotInterval; got != tc.want {
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
			e := openT(t, o)
			for i := 0; i < 100; i++ {
				mustObserve(t, e, fmt.Sprint(i), dedup.New)
			}
			if err := e.Commit(nil); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openT(t, o)
			st := e.Stats()
			if st.RestoredFrom != tc.want || st.RestoredKeys != 100 {
				t.Fatalf("restored %d keys from %q, want 100 from %q", st.RestoredKeys, st.RestoredFrom, tc.want)
			}
			mustObserve(t, e, "7", dedup.Duplicate)
		})
	}
}

// TestReopenAdoptsStateOptions: StateOptions returns every option the
// directory records, ExpectedRate and FalsePositiveRate included; Open with
// only Dir adopts them; an explicit value that contradicts the directory's
// shape is an error naming it; ExpectedRate and FalsePositiveRate size the
// generations made from now on, so a new value replaces the recorded one.
func TestReopenAdoptsStateOptions(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		dir := t.TempDir()
		created := dedup.Options{Dir: dir, Window: 10 * time.Minute, Generations: 5, Shards: 8,
			Filter: "cuckoo", Probabilistic: prob, ExpectedRate: 123, FalsePositiveRate: 0.02}
		e := openT(t, created)
		mustObserve(t, e, "A", dedup.New)
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		have, err := dedup.StateOptions(dir)
		if err != nil {
			t.Fatal(err)
		}
		same := func(got dedup.Options) bool {
			return got.Window == created.Window && got.Generations == 5 && got.Shards == 8 && got.Filter == "cuckoo" &&
				got.Probabilistic == prob && got.ExpectedRate == 123 && got.FalsePositiveRate == 0.02
		}
		if !same(have) || have.Dir != dir {
			t.Fatalf("StateOptions = %+v", have)
		}

		e = openT(t, dedup.Options{Dir: dir})
		if got := dedup.EngineOptions(e); !same(got) {
			t.Fatalf("Open(Options{Dir}) runs with %+v", got)
		}
		mustObserve(t, e, "A", dedup.Duplicate)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}

		for _, bad := range []struct {
			name string
			o    dedup.Options
		}{
			{"Window", dedup.Options{Dir: dir, Window: time.Hour}},
			{"Generations", dedup.Options{Dir: dir, Generations: 4}},
			{"Shards", dedup.Options{Dir: dir, Shards: 16}},
			{"Filter", dedup.Options{Dir: dir, Filter: "bloom"}},
		} {
			if _, err := dedup.Open(bad.o); !errors.Is(err, dedup.ErrIncompatible) || !strings.Contains(err.Error(), bad.name) {
				t.Fatalf("Open contradicting %s = %v, want ErrIncompatible naming it", bad.name, err)
			}
		}
		if !prob {
			if _, err := dedup.Open(dedup.Options{Dir: dir, Probabilistic: true}); !errors.Is(err, dedup.ErrIncompatible) {
				t.Fatalf("Open of an exact state as probabilistic = %v, want ErrIncompatible", err)
			}
		}

		e = openT(t, dedup.Options{Dir: dir, ExpectedRate: 456, FalsePositiveRate: 0.001})
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if have, err := dedup.StateOptions(dir); err != nil || have.ExpectedRate != 456 || have.FalsePositiveRate != 0.001 {
			t.Fatalf("StateOptions after reopening with new sizing = %+v, %v", have, err)
		}
	})
}

// TestSmallStateSmallOnDisk: a small state stays small on disk across
// restarts (Pebble's write-ahead logs are neither preallocated nor sized
// for a workload the options do not describe), and Stats.DiskBytes is what
// du reports for the state directory. Before, each restart left a 70 MiB
// preallocated log.
func TestSmallStateSmallOnDisk(t *testing.T) {
	dir := t.TempDir()
	o := dedup.Options{Dir: dir, Window: time.Minute, ExpectedRate: 100}
	for round := 0; round < 8; round++ {
		e := openT(t, o)
		for i := 0; i < 1000; i++ {
			mustObserve(t, e, fmt.Sprintf("r%d-%d", round, i), dedup.New)
		}
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		st := e.Stats()
		du, err := diskuse.Bytes(vfs.Default, dir)
		if err != nil {
			t.Fatal(err)
		}
		// Pebble may have flushed or compacted between the two readings.
		if diff := int64(st.DiskBytes) - int64(du); diff > 1<<20 || diff < -1<<20 || st.DiskBytes == 0 {
			t.Fatalf("round %d: Stats.DiskBytes %d, du %d", round, st.DiskBytes, du)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	du, err := diskuse.Bytes(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	if du > 4<<20 {
		t.Fatalf("a state of 8000 keys takes %d bytes on disk", du)
	}
	t.Logf("a state of 8000 keys takes %d bytes on disk", du)
}
