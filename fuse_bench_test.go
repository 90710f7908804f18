package dedup_test

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/cputime"
	"github.com/streamdedup/dedup/internal/testclock"
)

// BenchmarkFuseWindow compares Filter fuse with blocked and interleaved on
// a full window (BenchmarkObserveWindow's keys: 16M window keys in 4
// generations of 4M, or -fusewindow.gens, the timed keys going into the
// next, 2% of them repeats), probabilistic, on all cores, in rounds of 64k keys taken in
// turn. Every engine has a state directory (fuse needs one; the others
// then log their commits alike). The timed keys go into the newest
// generation, behind four sealed ones; the newest fills as they come, so
// the FP measured is under the peak's (see TestEngineFPOnTarget for that).
//
// Reported per variant: Mkeys/s (wall), process CPU ns per key, filter
// bytes per window key (Stats.FilterBytes: fuse's spool is on disk), Go
// heap bytes per window key once the window is in (each engine built
// alone, after a GC; it includes the store's memtable), the false
// positives among the fresh timed keys against the 1% target, snapshot
// bytes per window key and the snapshot's time, and the ratios of fuse to
// the others. For fuse, the time of the second ObserveBatch after each
// generation boundary (it seals every shard's generation before) per key
// sealed.
//
//	go test -run '^$' -bench BenchmarkFuseWindow -benchtime=2000000x .
func BenchmarkFuseWindow(b *testing.B) {
	w := fuseWindow(b)
	const round = 64 << 10
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		for _, v := range w.variants {
			t0, c0 := time.Now(), cputime.Process()
			v.fps.Add(int64(v.run(v.next, n)))
			v.wall += time.Since(t0)
			v.cpu += cputime.Process() - c0
			v.next += uint64(n)
			v.keys += n
		}
	}
	b.StopTimer()
	fuse := w.variants[len(w.variants)-1]
	for _, v := range w.variants {
		b.ReportMetric(float64(v.keys)/v.wall.Seconds()/1e6, v.name+"-Mkeys/s")
		b.ReportMetric(float64(v.cpu.Nanoseconds())/float64(v.keys), v.name+"-cpu-ns/key")
		b.ReportMetric(float64(v.filterBytes)/float64(w.window), v.name+"-B/key")
		b.ReportMetric(float64(v.heap)/float64(w.window), v.name+"-heapB/key")
		b.ReportMetric(float64(v.fps.Load())/float64(v.keys-v.keys/50)/0.01, v.name+"-FP/target")
		b.ReportMetric(float64(v.snapBytes)/float64(w.window), v.name+"-snapB/key")
		b.ReportMetric(v.snapTime.Seconds(), v.name+"-snap-s")
		if v != fuse {
			b.ReportMetric(fuse.wall.Seconds()/v.wall.Seconds(), "fuse-time-x-"+v.name)
			b.ReportMetric(fuse.cpu.Seconds()/v.cpu.Seconds(), "fuse-cpu-x-"+v.name)
			b.ReportMetric(float64(fuse.filterBytes)/float64(v.filterBytes), "fuse-bytes-x-"+v.name)
		}
	}
	b.ReportMetric(float64(w.sealTime.Nanoseconds())/float64(w.sealed), "fuse-seal-ns/key")
	for _, v := range w.variants {
		v.keys, v.wall, v.cpu = 0, 0, 0
		v.fps.Store(0)
	}
}

type fuseVariant struct {
	name        string
	run         func(from uint64, n int) (fps int)
	filterBytes uint64
	heap        uint64
	snapBytes   int64
	snapTime    time.Duration
	next        uint64
	keys        int
	wall        time.Duration
	cpu         time.Duration // process CPU time: less sensitive to a shared machine's load than wall
	fps         atomic.Int64
}

type fuseWindowBench struct {
	window   uint64
	variants []*fuseVariant
	sealTime time.Duration
	sealed   uint64
}

var fuseWindowOnce struct {
	sync.Once
	w *fuseWindowBench
}

func fuseWindow(b *testing.B) *fuseWindowBench {
	fuseWindowOnce.Do(func() { fuseWindowOnce.w = buildFuseWindow(b) })
	return fuseWindowOnce.w
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// fuseWindowGens is BenchmarkFuseWindow's Generations.
var fuseWindowGens = flag.Int("fusewindow.gens", 4, "Generations of BenchmarkFuseWindow's engines")

func buildFuseWindow(b *testing.B) *fuseWindowBench {
	const batch = 1024
	gens := uint64(*fuseWindowGens)
	window := uint64(16 << 20)
	if testing.Short() {
		window = 1 << 20
	}
	per := window / gens
	W := time.Duration(gens) * time.Hour
	span := time.Hour
	w := &fuseWindowBench{window: window}
	timedKey := timedWindowKey(window)
	build := func(kind, dir string) (*Engine, func(from uint64, n int) int) {
		clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		e, err := Open(Options{Dir: dir, Filter: kind, Probabilistic: true, Window: W, Generations: int(gens),
			ExpectedRate: float64(per) / span.Seconds(), MaxInFlight: 1 << 24, Now: clk.Now, SnapshotInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		observe := func(from uint64, n int, timed bool) int {
			if timed {
				fps, _ := observeSpread(b, e, from, n, batch, timedKey)
				return fps
			}
			fps, _ := observeSpread(b, e, from, n, batch, freshWindowKey)
			return fps
		}
		for g := range gens {
			for lo := uint64(0); lo < per; lo += 1 << 20 {
				if kind == "fuse" && g > 0 && lo == 0 {
					// The first batch after a boundary makes the new
					// generation (at its commit), the second seals the one
					// before in every shard.
					observe(g*per, batch, false)
					t0 := time.Now()
					observe(g*per+batch, batch, false)
					w.sealTime += time.Since(t0)
					w.sealed += per
					observe(g*per+2*batch, int(min(1<<20, per)-2*batch), false)
					continue
				}
				observe(g*per+lo, int(min(1<<20, per-lo)), false)
			}
			clk.Advance(span)
		}
		return e, func(from uint64, n int) int { return observe(from, n, true) }
	}
	for _, kind := range []string{"blocked", "interleaved", "wide", "fuse"} {
		before := heapInUse()
		// Not closed: the engines outlive the first call of the benchmark
		// (they are built once per process).
		dir, err := os.MkdirTemp("", "fusewindow-*")
		if err != nil {
			b.Fatal(err)
		}
		e, run := build(kind, dir)
		// The first timed batch makes the fifth generation, the second
		// seals the fourth (fuse), before the heap is read.
		run(1<<40, 1024)
		run(1<<40+1024, 1024)
		v := &fuseVariant{name: kind, run: run, filterBytes: e.Stats().FilterBytes, heap: heapInUse() - before}
		t0 := time.Now()
		if err := e.Snapshot(); err != nil {
			b.Fatal(err)
		}
		v.snapTime = time.Since(t0)
		v.snapBytes = e.Stats().SnapshotBytes
		w.variants = append(w.variants, v)
	}
	if w.sealed == 0 {
		b.Fatal(fmt.Errorf("no seal timed"))
	}
	return w
}
