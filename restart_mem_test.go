package dedup_test

import (
	"encoding/binary"
	"math"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

// restartState is restartEngineRate, with the Go heap (after a GC) while
// the reopened engine is open.
func restartState(t testing.TB, filterKind string, perGen, gens int, snapAt int, rate float64) (before, after Stats, ha uint64) {
	before, after, e, _ := restartEngineRate(t, filterKind, perGen, gens, snapAt, rate)
	ha = heap()
	e.Close()
	return before, after, ha
}

// restartEngine fills a probabilistic engine on a crashable file system
// with perGen keys (0, 1, ...: 8 bytes little-endian) in each of gens
// generations, committed in 20 batches a generation while the clock moves
// through it, snapshots before batch snapAt (counted over all
// generations), then returns the stats before a simulated kill -9 (a
// crash clone of the file system) and right after Open on the clone, and
// the reopened engine.
func restartEngine(t testing.TB, filterKind string, perGen, gens int, snapAt int) (before, after Stats, e2 *Engine, committed []bool) {
	return restartEngineRate(t, filterKind, perGen, gens, snapAt, 0)
}

// restartEngineRate is restartEngine with Options.ExpectedRate rate (0:
// the default). committed[i] is whether key i was New, and so committed.
func restartEngineRate(t testing.TB, filterKind string, perGen, gens int, snapAt int, rate float64) (before, after Stats, e2 *Engine, committed []bool) {
	fs := vfs.NewCrashableMem()
	clk := testclock.New(t0)
	o := Options{Dir: "/state", FS: fs, Probabilistic: true, Now: clk.Now, Window: time.Hour, Filter: filterKind, SnapshotInterval: -1, ExpectedRate: rate}
	e, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	span := time.Hour / 4
	const batches = 20
	batch := make([][]byte, 0, perGen/batches)
	out := make([]Verdict, perGen/batches)
	var n uint64
	for g := 0; g < gens; g++ {
		for b := 0; b < batches; b++ {
			if g*batches+b == snapAt {
				if err := e.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			batch = batch[:0]
			for i := 0; i < perGen/batches; i++ {
				k := make([]byte, 8)
				binary.LittleEndian.PutUint64(k, n)
				n++
				batch = append(batch, k)
			}
			if err := e.ObserveBatch(batch, out[:len(batch)]); err != nil {
				t.Fatal(err)
			}
			for _, v := range out[:len(batch)] {
				committed = append(committed, v == New)
			}
			if err := e.Commit([]byte(strconv.FormatUint(n, 10))); err != nil {
				t.Fatal(err)
			}
			clk.Advance(span / batches)
		}
	}
	before = e.Stats()
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e.Close()
	o.FS = clone
	e2, err = Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return before, e2.Stats(), e2, committed
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestRestartMemoryMeasure prints the filter bytes per key before a kill -9
// and after the reopen, for every kind and several moments of the last
// snapshot (DEDUP_RESTART_MEASURE=keys a generation; docs/sizing.md).
func TestRestartMemoryMeasure(t *testing.T) {
	if os.Getenv("DEDUP_RESTART_MEASURE") == "" {
		t.Skip("set DEDUP_RESTART_MEASURE")
	}
	perGen, _ := strconv.Atoi(os.Getenv("DEDUP_RESTART_MEASURE"))
	for _, k := range []string{"blocked", "bloom", "fuse", "interleaved", "wide"} {
		for _, c := range []struct {
			gens, snapAt int
			rate         float64
		}{{5, -1, 0}, {5, 81, 0}, {5, 99, 0}, {2, 1, 0}, {1, 1, 0}, {5, 81, 500}, {5, -1, 500}} {
			snapAt := c.snapAt
			b, a, ha := restartState(t, k, perGen, c.gens, snapAt, c.rate)
			bb := float64(b.FilterBytes) / float64(b.FilterKeys)
			ab := float64(a.FilterBytes) / float64(a.FilterKeys)
			t.Logf("%-11s gens %d rate %v snap@%2d: before %d keys %.3f B/key, after %d keys %.3f B/key (%s), ratio %.2f; heap after %.1f MiB",
				k, c.gens, c.rate, snapAt, b.FilterKeys, bb, a.FilterKeys, ab, a.RestoredFrom, ab/bb, float64(ha)/(1<<20))
		}
	}
}

// TestRestartFilterBytes restarts a probabilistic state after a simulated
// kill -9, its last snapshot taken early in a generation, and checks that
// the filters hold about the bytes per key they held before the crash,
// with every committed key still Duplicate and the FP on target. Before
// the commit log's keys were reserved for (restore.go, reserveReplay), a
// generation restored small chained a run of doubling growth links for
// them: 2.3x the bytes per key for fuse, 1.4x for blocked.
func TestRestartFilterBytes(t *testing.T) {
	const perGen = 200_000
	for _, kind := range []string{"blocked", "bloom", "fuse"} {
		for _, c := range []struct{ gens, snapAt int }{{1, 1}, {2, 1}, {3, 41}} {
			t.Run(kind+"/"+strconv.Itoa(c.gens)+"gens", func(t *testing.T) {
				restartCheck(t, kind, perGen, c.gens, c.snapAt)
			})
		}
	}
}

func restartCheck(t *testing.T, kind string, perGen, gens, snapAt int) {
	before, after, e, committed := restartEngine(t, kind, perGen, gens, snapAt)
	defer e.Close()
	if after.RestoredFrom != RestoredSnapshot {
		t.Fatalf("restored from %q, want %q", after.RestoredFrom, RestoredSnapshot)
	}
	bb := float64(before.FilterBytes) / float64(before.FilterKeys)
	ab := float64(after.FilterBytes) / float64(after.FilterKeys)
	// Fuse: the restored newest generation stays blocked (no spool), and
	// the keys replayed into it take a growth link at 1/64 of its target.
	bound := 1.2
	if kind == "fuse" {
		bound = 1.6
	}
	t.Logf("bytes per key: %.3f before the crash, %.3f after (%.2fx)", bb, ab, ab/bb)
	if ab > bound*bb {
		t.Errorf("bytes per key after the restart %.3f = %.2fx the %.3f before it, want at most %.1fx", ab, ab/bb, bb, bound)
	}
	// No false negative: every committed key is Duplicate.
	n := uint64(perGen * gens)
	keys := make([][]byte, 0, 4096)
	out := make([]Verdict, 4096)
	check := func(from, to uint64, want func(i uint64, v Verdict) bool) (bad int) {
		for i := from; i < to; {
			keys = keys[:0]
			for ; i < to && len(keys) < cap(keys); i++ {
				k := make([]byte, 8)
				binary.LittleEndian.PutUint64(k, i)
				keys = append(keys, k)
			}
			for j, k := range keys {
				v, err := e.Peek(k)
				if err != nil {
					t.Fatal(err)
				}
				out[j] = v
			}
			for j, v := range out[:len(keys)] {
				if !want(i-uint64(len(keys))+uint64(j), v) {
					bad++
				}
			}
		}
		return bad
	}
	if bad := check(0, n, func(i uint64, v Verdict) bool { return !committed[i] || v == Duplicate }); bad > 0 {
		t.Fatalf("%d of %d committed keys not Duplicate after the restart", bad, n)
	}
	// The FP of new keys against the restored filters, within the target
	// plus 4 sigma.
	const probes = 200_000
	fp := check(1<<40, 1<<40+probes, func(_ uint64, v Verdict) bool { return v == New })
	target := 0.01
	sigma := math.Sqrt(target * (1 - target) / probes)
	if rate := float64(fp) / probes; rate > target+4*sigma {
		t.Errorf("FP of new keys after the restart %.4f, want at most the target %.2f (+4 sigma)", rate, target)
	} else {
		t.Logf("FP of new keys after the restart %.4f (target %.2f)", rate, target)
	}
}
