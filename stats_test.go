package dedup_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

// fuseStatsEngine opens a Filter "fuse" engine on fs (2 shards, 4
// generations of an hour), fills generations generations with keys,
// committed, and makes the next one, so that every generation but the
// newest is due to be sealed. It returns the engine's Stats.
func fuseStatsEngine(t *testing.T, fs vfs.FS, generations int) Stats {
	t.Helper()
	clk := testclock.New(t0)
	e := openT(t, Options{Dir: "/f", FS: fs, Filter: "fuse", Window: 4 * time.Hour, Generations: 4, Shards: 2,
		Now: clk.Now, SnapshotInterval: -1, Logf: func(string, ...any) {}})
	n := 0
	for range generations + 1 {
		for range 2000 {
			mustObserve(t, e, fmt.Sprintf("k%d", n), New)
			n++
		}
		mustCommit(t, e, "")
		clk.Advance(time.Hour)
	}
	return e.Stats()
}

// TestStatsFuseGenerations: Stats names each generation's filter kind and
// whether it is sealed, and counts the seals, so that an operator can tell
// a fuse state's static generations from its blocked ones. The newest
// generation is blocked and not sealed, the older ones fuse and sealed,
// and each shard's seal counts once.
func TestStatsFuseGenerations(t *testing.T) {
	st := fuseStatsEngine(t, vfs.NewMem(), 3)
	gs := st.GenerationStats
	if len(gs) != 4 {
		t.Fatalf("%d generations, want 4: %+v", len(gs), gs)
	}
	for i, g := range gs {
		newest := i == len(gs)-1
		if newest && (g.Kind != "blocked" || g.Sealed) || !newest && (g.Kind != "fuse" || !g.Sealed) {
			t.Errorf("generation %d (newest %v): kind %q sealed %v", g.ID, newest, g.Kind, g.Sealed)
		}
	}
	if st.Seals != 2*3 || st.SealErrors != 0 {
		t.Errorf("seals %d, errors %d; want 6 (3 generations, 2 shards), 0", st.Seals, st.SealErrors)
	}

	// The other filters are never sealed.
	e := openT(t, Options{Window: time.Hour, Shards: 2})
	mustObserve(t, e, "a", New)
	mustCommit(t, e, "")
	st = e.Stats()
	if len(st.GenerationStats) != 1 || st.GenerationStats[0].Kind != "blocked" || st.GenerationStats[0].Sealed || st.Seals != 0 {
		t.Errorf("blocked engine: %+v, seals %d", st.GenerationStats, st.Seals)
	}
}

// TestStatsSealErrors: a spool that cannot be written (a full disk) leaves
// its generation blocked; Stats counts it in SealErrors instead of looking
// like a run that sealed, and a generation sealed in one shard only shows
// both kinds, not sealed.
func TestStatsSealErrors(t *testing.T) {
	t.Run("every write", func(t *testing.T) {
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpFileWrite && strings.Contains(op.Path, "/"+SpoolDir+"/") {
				return errorfs.ErrInjected
			}
			return nil
		})
		// Each spool fails when its buffer is written out, at the latest
		// when it is read back for the seal (rotate's TestFuseSpoolErrors
		// has the failed appends).
		st := fuseStatsEngine(t, errorfs.Wrap(vfs.NewMem(), inj), 3)
		if st.Seals != 0 || st.SealErrors < 2*3 {
			t.Errorf("seals %d, errors %d; want 0, at least 6", st.Seals, st.SealErrors)
		}
		for _, g := range st.GenerationStats {
			if g.Kind != "blocked" || g.Sealed {
				t.Errorf("generation %d: kind %q sealed %v", g.ID, g.Kind, g.Sealed)
			}
		}
	})
	t.Run("one spool", func(t *testing.T) {
		var creates atomic.Int32
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpCreate && strings.Contains(op.Path, "/"+SpoolDir+"/") && creates.Add(1) == 1 {
				return errorfs.ErrInjected
			}
			return nil
		})
		st := fuseStatsEngine(t, errorfs.Wrap(vfs.NewMem(), inj), 3)
		if st.Seals != 2*3-1 || st.SealErrors != 1 {
			t.Errorf("seals %d, errors %d; want 5, 1", st.Seals, st.SealErrors)
		}
		g := st.GenerationStats[0]
		if g.Kind != "blocked+fuse" || g.Sealed {
			t.Errorf("generation %d, one shard's spool failed: kind %q sealed %v; want blocked+fuse, not sealed", g.ID, g.Kind, g.Sealed)
		}
	})
}
