package filter

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/streamdedup/dedup/internal/cputime"

	"github.com/streamdedup/dedup/internal/hashmix"
)

// BenchmarkWindow compares, on one full window, the ways a dedup
// pre-filter can answer "seen in any live generation?" and remember a new
// key:
//
//   - interleaved/lines=1 and lines=2: one LaneTable with a lane per
//     generation; a batch is probed with TestBatch (every lane in one access
//     per key, prefetched ahead), then its new keys are added to the current
//     lane with AddBatch.
//   - blocked-per-generation: today's ring, one blocked filter per
//     generation sized as rotate sizes them (fp/(N+1) each), probed
//     generation by generation with prefetching as the engine's probe does,
//     then the new keys added to the current generation.
//   - bitsandblooms: one github.com/bits-and-blooms/bloom/v3 filter sized
//     for the whole window at fp (no expiry at all), TestAndAdd per key.
//
// The window holds N = 4 generations of window/N keys each (16M keys in
// all, N+1 = 5 lanes or filters); the timed keys go into the fifth, the
// current one. 2% of the timed keys are repeats of window keys. Keys are
// given as 64-bit hashes (the engine hashes once, outside the filters); the
// bits-and-blooms filter gets those 8 bytes and hashes them itself.
//
// All four are built once and then take turns: rounds of 64k keys each, so
// that on a shared machine every variant sees the same load, and the
// ratios hold even when the absolute numbers do not. Each variant processes
// b.N keys. Reported per variant: Mkeys/s of its own thread CPU time
// (cpu-Mkeys/s: leaves out time spent descheduled, not the cache and memory
// stalls others cause) and of wall time, bytes per key of the window, and
// the share of its new keys that matched (the false-positive rate on the
// way, as the current generation fills); then the ratios of the first
// variant to the others.
//
// Keep b.N under window/N - 1 (run with -benchtime=2000000x): the current
// generation must not outgrow its capacity.
//
//	go test -run '^$' -bench BenchmarkWindow -benchtime=2000000x ./filter
func BenchmarkWindow(b *testing.B) {
	w := windowBench(b)
	const round = 64 << 10
	hs := make([]uint64, windowBatch)
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		for _, v := range w.variants {
			runtime.LockOSThread()
			c0, _ := cputime.Thread()
			t0 := time.Now()
			for k := 0; k < n; k += windowBatch {
				m := min(windowBatch, n-k)
				fresh := 0
				for i := range m {
					if (v.next+uint64(i))%50 == 0 {
						hs[i] = hashmix.Splitmix64((v.next * 7919) % w.window) // a repeat
					} else {
						hs[i] = hashmix.Splitmix64((v.next + uint64(i)) | 1<<62)
						fresh++
					}
				}
				v.next += uint64(m)
				v.matched += v.run(hs[:m]) - (m - fresh)
				v.fresh += fresh
			}
			v.wall += time.Since(t0)
			c1, _ := cputime.Thread()
			runtime.UnlockOSThread()
			v.cpu += c1 - c0
			v.keys += n
		}
	}
	b.StopTimer()
	for i, v := range w.variants {
		b.ReportMetric(float64(v.keys)/v.cpu.Seconds()/1e6, v.name+"-cpu-Mkeys/s")
		b.ReportMetric(float64(v.keys)/v.wall.Seconds()/1e6, v.name+"-Mkeys/s")
		b.ReportMetric(float64(v.size())/float64(w.window), v.name+"-B/key")
		b.ReportMetric(float64(v.matched)/float64(max(v.fresh, 1)), v.name+"-FP")
		if i > 0 {
			b.ReportMetric(v.cpu.Seconds()/w.variants[0].cpu.Seconds(), "interleaved1-x-"+v.name)
		}
	}
	for _, v := range w.variants {
		v.keys, v.cpu, v.wall, v.matched, v.fresh = 0, 0, 0, 0, 0
	}
}

const windowBatch = 1024

type windowVariant struct {
	name    string
	size    func() uint64
	run     func(hs []uint64) (matched int)
	next    uint64 // timed keys used so far (they stay inserted)
	keys    int
	fresh   int
	matched int // fresh keys that matched
	cpu     time.Duration
	wall    time.Duration
}

type windowState struct {
	window   uint64
	variants []*windowVariant
}

var windowOnce struct {
	sync.Once
	w *windowState
}

// windowBench builds BenchmarkWindow's filters once per process: filling
// them is most of the run, and the benchmark function is called more than
// once.
func windowBench(b *testing.B) *windowState {
	windowOnce.Do(func() { windowOnce.w = buildWindow(b) })
	return windowOnce.w
}

func buildWindow(b *testing.B) *windowState {
	const gens = 4
	const fp = 0.01
	window := uint64(16 << 20)
	if testing.Short() {
		window = 1 << 20
	}
	per := window / gens
	w := &windowState{window: window}
	// key i of the window is Splitmix64(i), timed new keys Splitmix64(i | 1<<62).
	fill := func(add func(hs []uint64, gen int)) {
		hs := make([]uint64, 0, windowBatch)
		for g := range gens {
			for i := uint64(0); i < per; i++ {
				hs = append(hs, hashmix.Splitmix64(uint64(g)*per+i))
				if len(hs) == windowBatch {
					add(hs, g)
					hs = hs[:0]
				}
			}
			add(hs, g)
			hs = hs[:0]
		}
	}

	for _, lines := range []int{1, 2, wideLines} {
		t := mustInterleaved(b, LaneTableOptions{Lanes: gens + 1, Capacity: per, FalsePositiveRate: fp, Lines: lines})
		name := fmt.Sprintf("interleaved%d", lines)
		if lines == wideLines {
			name = "wide"
		}
		fill(func(hs []uint64, g int) { t.AddBatch(hs, g) })
		out := make([]LaneSet, windowBatch)
		fresh := make([]uint64, 0, windowBatch)
		w.variants = append(w.variants, &windowVariant{
			name: name,
			size: t.SizeBytes,
			run: func(hs []uint64) int {
				t.TestBatch(hs, out)
				fresh = fresh[:0]
				for i, s := range out[:len(hs)] {
					if s == 0 {
						fresh = append(fresh, hs[i])
					}
				}
				t.AddBatch(fresh, gens)
				return len(hs) - len(fresh)
			},
		})
	}

	fs := make([]*chain, gens+1)
	for g := range fs {
		fs[g] = mustNew(b, Blocked, per, fp/(gens+1))
	}
	fill(func(hs []uint64, g int) {
		for _, h := range hs {
			fs[g].Add(h)
		}
	})
	maybe := make([]bool, windowBatch)
	fresh := make([]uint64, 0, windowBatch)
	w.variants = append(w.variants, &windowVariant{
		name: "blocked",
		size: func() uint64 {
			var n uint64
			for _, f := range fs {
				n += f.SizeBytes()
			}
			return n
		},
		run: func(hs []uint64) int {
			clear(maybe)
			for g := gens; g >= 0; g-- {
				f := fs[g]
				for _, h := range hs[:min(interleavedAhead, len(hs))] {
					f.Prefetch(h)
				}
				for i, h := range hs {
					if j := i + interleavedAhead; j < len(hs) {
						f.Prefetch(hs[j])
					}
					maybe[i] = maybe[i] || f.Test(h)
				}
			}
			fresh = fresh[:0]
			for i, m := range maybe[:len(hs)] {
				if !m {
					fresh = append(fresh, hs[i])
				}
			}
			cur := fs[gens]
			for _, h := range fresh[:min(interleavedAhead, len(fresh))] {
				cur.Prefetch(h)
			}
			for i, h := range fresh {
				if j := i + interleavedAhead; j < len(fresh) {
					cur.Prefetch(fresh[j])
				}
				cur.Add(h)
			}
			return len(hs) - len(fresh)
		},
	})

	bf := bloom.NewWithEstimates(uint(window), fp)
	var kb [8]byte
	fill(func(hs []uint64, _ int) {
		for _, h := range hs {
			binary.LittleEndian.PutUint64(kb[:], h)
			bf.Add(kb[:])
		}
	})
	w.variants = append(w.variants, &windowVariant{
		name: "bitsandblooms",
		size: func() uint64 { return uint64(bf.Cap() / 8) },
		run: func(hs []uint64) int {
			n := 0
			for _, h := range hs {
				binary.LittleEndian.PutUint64(kb[:], h)
				if bf.TestAndAdd(kb[:]) {
					n++
				}
			}
			return n
		},
	})
	return w
}

// BenchmarkInterleavedClearLane measures the rotation's cost: clearing one
// lane of a table sized for 4M keys per lane (5 lanes, 1%), in ns per
// byte of table and ms per clear.
func BenchmarkInterleavedClearLane(b *testing.B) {
	for _, lines := range []int{1, 2, wideLines} {
		b.Run(fmt.Sprintf("lines=%d", lines), func(b *testing.B) {
			t := mustInterleaved(b, LaneTableOptions{Lanes: 5, Capacity: 4 << 20, FalsePositiveRate: 0.01, Lines: lines})
			defer runtime.GC()
			b.SetBytes(int64(t.SizeBytes()))
			b.ResetTimer()
			for i := range b.N {
				t.ClearLane(i % 5)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/clear")
		})
	}
}
