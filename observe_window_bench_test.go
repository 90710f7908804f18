//go:build unix

package dedup_test

import (
	"context"
	"encoding/binary"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
	pbloom "github.com/parquet-go/parquet-go/bloom"
	"github.com/streamdedup/dedup/internal/cputime"
	"github.com/streamdedup/dedup/internal/testclock"
)

// BenchmarkObserveWindow runs probabilistic ObserveBatch on a full window
// of 16M keys (4 generations of 4M, the timed keys going into the fifth)
// on two goroutines, for Filter blocked (one filter per generation),
// interleaved (one lane table of packed lanes) and wide (one lane table, a
// blocked line per generation, a key's lines adjacent), against two bare filters on as many
// goroutines over the same keys: bits-and-blooms TestAndAdd and
// parquet-go's split-block filter (Check then Insert), each goroutine with
// one filter sized at 1% for its half of the window's keys, no expiry (the
// floor a user would start from). 2% of the timed keys repeat window keys.
// Keys are 16 bytes, generated from their index as they go.
//
// The variants take turns in rounds of 256k keys so that on a shared
// machine each sees the same load; each processes b.N keys. Reported per
// variant: Mkeys/s (wall), CPU time per key (the whole process's, all
// threads: on a shared machine the wall ratios move with the neighbours'
// load, CPU time much less), filter bytes per window key, the measured
// false-positive rate (fresh keys answered Duplicate), and the wall-clock
// ratios of each engine variant to bits-and-blooms and to the split-block
// filter; and the default engine again with the advisor's horizon off
// (HorizonSample -1) and with the whole window advisor and the observed-FP
// shadow off (DisableAdvice): horizon-cost% and advice-cost% are the wall
// time they add to the default engine's. Keep b.N at
// most 4M (-benchtime=2000000x). -short uses a 1M-key window,
// DEDUP_OBSERVE_WINDOW_KEYS=n one of n keys (the 100M-key run:
// DEDUP_OBSERVE_WINDOW_KEYS=100000000, about 1 GB).
// DEDUP_OBSERVE_WINDOW_CPUPROFILE=file writes a CPU profile of the timed
// rounds alone.
//
//	go test -run '^$' -bench BenchmarkObserveWindow -benchtime=2000000x .
func BenchmarkObserveWindow(b *testing.B) {
	w := observeWindow(b)
	if path := os.Getenv("DEDUP_OBSERVE_WINDOW_CPUPROFILE"); path != "" {
		// The timed rounds only: -cpuprofile would mostly show the window's
		// build.
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	const round = 256 << 10
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		for _, v := range w.variants {
			t0, c0 := time.Now(), cputime.Process()
			var fps, fresh int
			// Labelled for the profile: go tool pprof -tagfocus 'variant=^blocked$'.
			pprof.Do(context.Background(), pprof.Labels("variant", v.name), func(context.Context) {
				fps, fresh = v.run(v.next, n)
			})
			v.wall += time.Since(t0)
			v.cpu += cputime.Process() - c0
			v.next += uint64(n)
			v.keys += n
			v.fps += fps
			v.fresh += fresh
		}
	}
	b.StopTimer()
	byName := map[string]*windowVariant{}
	for _, v := range w.variants {
		byName[v.name] = v
		b.ReportMetric(float64(v.keys)/v.wall.Seconds()/1e6, v.name+"-Mkeys/s")
		b.ReportMetric(float64(v.bytes())/float64(w.window), v.name+"-B/key")
		b.ReportMetric(float64(v.cpu.Nanoseconds())/float64(v.keys), v.name+"-cpuns/key")
		b.ReportMetric(100*float64(v.fps)/float64(max(v.fresh, 1)), v.name+"-FP%")
	}
	for _, e := range []string{"blocked", "interleaved", "wide"} {
		for _, p := range []string{"bitsandblooms", "sbbf"} {
			b.ReportMetric(byName[p].wall.Seconds()/byName[e].wall.Seconds(), e+"-x-"+p)
		}
	}
	b.ReportMetric(byName["blocked"].wall.Seconds()/byName["interleaved"].wall.Seconds(), "interleaved-x-blocked")
	b.ReportMetric(byName["blocked"].wall.Seconds()/byName["wide"].wall.Seconds(), "wide-x-blocked")
	// What the window advisor's horizon costs the default engine.
	b.ReportMetric(100*(byName["blocked"].wall.Seconds()/byName["blocked-nohorizon"].wall.Seconds()-1), "horizon-cost%")
	b.ReportMetric(100*(byName["blocked"].wall.Seconds()/byName["blocked-noadvice"].wall.Seconds()-1), "advice-cost%")
	for _, v := range w.variants {
		v.keys, v.wall, v.cpu, v.fps, v.fresh = 0, 0, 0, 0, 0
	}
}

type windowVariant struct {
	name string
	// run processes keys [from, from+n) and returns how many fresh keys
	// were answered Duplicate, out of how many fresh keys.
	run        func(from uint64, n int) (fps, fresh int)
	bytes      func() uint64
	next       uint64
	keys       int
	fps, fresh int
	wall       time.Duration
	cpu        time.Duration // the process's CPU time (user and system) while it ran
}

type windowBench struct {
	window   uint64
	variants []*windowVariant
}

var observeWindowOnce struct {
	sync.Once
	w *windowBench
}

// windowKey writes key i (16 bytes) into k: window keys have i below the
// window, timed keys i | 1<<62.
func windowKey(k []byte, i uint64) {
	x := i*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	binary.LittleEndian.PutUint64(k, x^x>>29)
	binary.LittleEndian.PutUint64(k[8:], i)
}

// observeSpread runs keys [from, from+n), each written by key, through
// e.ObserveBatch in batches of batch keys on two goroutines, then commits.
// It returns how many of the keys key reported fresh got Duplicate (false
// positives), and how many it reported fresh.
func observeSpread(b *testing.B, e *Engine, from uint64, n, batch int, key func(k []byte, i uint64) (fresh bool)) (int, int) {
	var wg sync.WaitGroup
	var fps, freshN atomic.Int64
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16*batch)
			keys := make([][]byte, batch)
			fresh := make([]bool, batch)
			out := make([]Verdict, batch)
			for lo := g * batch; lo < n; lo += 2 * batch {
				m := min(batch, n-lo)
				for j := range m {
					keys[j] = buf[16*j : 16*j+16]
					fresh[j] = key(keys[j], from+uint64(lo+j))
				}
				if err := e.ObserveBatch(keys[:m], out); err != nil {
					b.Error(err)
					return
				}
				nf, nfp := 0, 0
				for j, v := range out[:m] {
					if fresh[j] {
						nf++
						if v == Duplicate {
							nfp++
						}
					}
				}
				fps.Add(int64(nfp))
				freshN.Add(int64(nf))
			}
		}()
	}
	wg.Wait()
	if err := e.Commit(nil); err != nil {
		b.Fatal(err)
	}
	return int(fps.Load()), int(freshN.Load())
}

// timedWindowKey returns the key writer of the timed stream over a window
// of window keys: 2% repeat window keys, the others are fresh.
func timedWindowKey(window uint64) func(k []byte, i uint64) (fresh bool) {
	return func(k []byte, i uint64) bool {
		if i%50 == 0 {
			windowKey(k, (i*7919)%window)
			return false
		}
		windowKey(k, i|1<<62)
		return true
	}
}

// freshWindowKey is windowKey for a stream of keys never seen before.
func freshWindowKey(k []byte, i uint64) bool {
	windowKey(k, i)
	return true
}

func observeWindow(b *testing.B) *windowBench {
	observeWindowOnce.Do(func() { observeWindowOnce.w = buildObserveWindow(b) })
	return observeWindowOnce.w
}

func buildObserveWindow(b *testing.B) *windowBench {
	const gens, batch = 4, 1024
	window := uint64(16 << 20)
	if testing.Short() {
		window = 1 << 20
	}
	if v := os.Getenv("DEDUP_OBSERVE_WINDOW_KEYS"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < gens<<20 {
			b.Fatalf("DEDUP_OBSERVE_WINDOW_KEYS=%q: want a number of keys, at least %d", v, gens<<20)
		}
		window = n
	}
	per := window / gens
	W := 4 * time.Hour
	span := W / gens
	w := &windowBench{window: window}
	timedKey := timedWindowKey(window)
	for _, name := range []string{"blocked", "interleaved", "wide", "blocked-nohorizon", "blocked-noadvice"} {
		kind, horizon := name, 0
		switch name {
		case "blocked-nohorizon":
			kind, horizon = "blocked", -1
		case "blocked-noadvice":
			kind = "blocked"
		}
		clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		e, err := Open(Options{Filter: kind, Probabilistic: true, Window: W, Generations: gens,
			ExpectedRate: float64(per) / span.Seconds(), MaxInFlight: 1 << 24, Now: clk.Now, HorizonSample: horizon})
		if err != nil {
			b.Fatal(err)
		}
		if name == "blocked-noadvice" {
			DisableAdvice(e)
		}
		// Not closed: the engines outlive the first call of the benchmark
		// (they are built once per process), and hold no files.
		// The clock moves with the keys, as a stream's does: a first
		// generation filled at one instant would read as a rate without
		// bound, and the young engine would chain its filter for it.
		for g := range uint64(gens) {
			start := clk.Now()
			chunk := uint64(1 << 20)
			if g == 0 {
				chunk = 1 << 12 // the young generation's sizing reads the rate
			}
			for lo := uint64(0); lo < per; lo += chunk {
				n := min(chunk, per-lo)
				observeSpread(b, e, g*per+lo, int(n), batch, freshWindowKey)
				clk.Set(start.Add(time.Duration(float64(span) * float64(lo+n) / float64(per))))
			}
		}
		w.variants = append(w.variants, &windowVariant{
			name:  name,
			run:   func(from uint64, n int) (int, int) { return observeSpread(b, e, from, n, batch, timedKey) },
			bytes: func() uint64 { return e.Stats().FilterBytes },
		})
	}
	// The bare filters: goroutine g owns filter g and the keys of index
	// i%2 == g, window keys and timed keys alike (a repeat of window key
	// (i*7919)%window has i's parity: the window is even).
	var bfs [2]*bloom.BloomFilter
	var sbs [2]pbloom.SplitBlockFilter
	for g := range 2 {
		bfs[g] = bloom.NewWithEstimates(uint(window/2), 0.01)
		sbs[g] = make(pbloom.SplitBlockFilter, pbloom.NumSplitBlocksOf(int64(window/2), sbbfBitsPerKey))
	}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := make([]byte, 16)
			for i := uint64(g); i < window; i += 2 {
				windowKey(k, i)
				bfs[g].Add(k)
				sbs[g].Insert(xxhash.Sum64(k))
			}
		}()
	}
	wg.Wait()
	bare := func(test func(g int, k []byte) bool) func(from uint64, n int) (int, int) {
		return func(from uint64, n int) (int, int) {
			var fps, fresh [2]int
			var wg sync.WaitGroup
			for g := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k := make([]byte, 16)
					i := from + uint64(g)
					if i%2 != uint64(g) {
						i--
					}
					for i < from {
						i += 2
					}
					for ; i < from+uint64(n); i += 2 {
						f := timedKey(k, i)
						if test(g, k) && f {
							fps[g]++
						}
						if f {
							fresh[g]++
						}
					}
				}()
			}
			wg.Wait()
			return fps[0] + fps[1], fresh[0] + fresh[1]
		}
	}
	w.variants = append(w.variants, &windowVariant{
		name:  "bitsandblooms",
		run:   bare(func(g int, k []byte) bool { return bfs[g].TestAndAdd(k) }),
		bytes: func() uint64 { return uint64(bfs[0].Cap()/8 + bfs[1].Cap()/8) },
	}, &windowVariant{
		name: "sbbf",
		run: bare(func(g int, k []byte) bool {
			h := xxhash.Sum64(k)
			if sbs[g].Check(h) {
				return true
			}
			sbs[g].Insert(h)
			return false
		}),
		bytes: func() uint64 { return uint64(len(sbs[0].Bytes()) + len(sbs[1].Bytes())) },
	})
	return w
}

// sbbfBitsPerKey is the split-block filter's bits per key for about 1%
// false positives.
const sbbfBitsPerKey = 11
