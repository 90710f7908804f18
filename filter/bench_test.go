package filter

import (
	"fmt"
	"math/bits"
	"runtime"
	"testing"
	"time"

	"github.com/streamdedup/dedup/internal/cputime"

	"github.com/streamdedup/dedup/internal/hashmix"
)

// BenchmarkFilter measures each kind at 1M, 10M and 100M keys and 1% and
// 0.1%: ns per TestOrAdd of a new key on a nearly full filter, and ns per
// Test of an absent key (a miss, the common case of a dedup pre-filter) on a
// full one, with bytes per key and the measured false-positive rate.
//
// The filter of each configuration is built once, with capacity n: it is
// prefilled to n - min(0.6n, 1M) keys untimed; TestOrAdd then inserts the
// next b.N keys (so keep b.N+1 <= 600000: run with -benchtime=500000x, and
// the filter never grows); then it is filled to n untimed and TestMiss
// probes b.N keys never inserted. Keys are Splitmix64(i), probes
// Splitmix64(i | 1<<63): distinct by construction. Each op includes one Splitmix64
// (~1 ns). Iterations are independent, so the CPU overlaps the cache misses
// of consecutive ops: these are throughput figures, not single-op latency.
//
// Each configuration's children share the filter its parent built: do not
// use -count > 1 (the second TestOrAdd run would push the filter past
// capacity); repeat the whole command instead.
//
//	go test -run '^$' -bench BenchmarkFilter -benchtime=500000x ./filter
func BenchmarkFilter(b *testing.B) {
	for _, kind := range Kinds {
		for _, n := range []uint64{1_000_000, 10_000_000, 100_000_000} {
			for _, fp := range []float64{0.01, 0.001} {
				b.Run(fmt.Sprintf("%s/n=%dM/fp=%g", kind, n/1_000_000, fp), func(b *testing.B) {
					benchFilter(b, kind, n, fp)
				})
			}
		}
	}
}

func benchFilter(b *testing.B, kind Kind, n uint64, fp float64) {
	if kind == Cuckoo && n >= 100_000_000 && fp < 0.01 {
		b.Skip("cuckoo at 0.1% runs at load 1.6% (8-bit fingerprints): 100M keys need an 8 GiB table")
	}
	if n >= 100_000_000 && testing.Short() {
		b.Skip("100M keys in -short mode")
	}
	f, err := New(kind, n, fp)
	if err != nil {
		b.Fatal(err)
	}
	defer runtime.GC()
	budget := min(n*6/10, 1_000_000)
	next := uint64(0)
	for ; next < n-budget; next++ {
		f.Add(hashmix.Splitmix64(next))
	}
	bytesPerKey := func() float64 { return float64(f.SizeBytes()) / float64(f.Count()) }

	b.Run("TestOrAdd", func(b *testing.B) {
		if uint64(b.N) > n-next {
			b.Logf("b.N %d past the %d new keys left: the filter grows", b.N, n-next)
		}
		b.ReportAllocs()
		cpu := startCPU()
		b.ResetTimer()
		for range b.N {
			f.TestOrAdd(hashmix.Splitmix64(next))
			next++
		}
		b.StopTimer()
		cpu.report(b)
		b.ReportMetric(bytesPerKey(), "B/key")
	})

	for ; next < n; next++ {
		f.Add(hashmix.Splitmix64(next))
	}
	probe := uint64(1) << 63
	b.Run("TestMiss", func(b *testing.B) {
		b.ReportAllocs()
		pos := 0
		cpu := startCPU()
		b.ResetTimer()
		for range b.N {
			if f.Test(hashmix.Splitmix64(probe)) {
				pos++
			}
			probe++
		}
		b.StopTimer()
		cpu.report(b)
		b.ReportMetric(bytesPerKey(), "B/key")
		b.ReportMetric(float64(pos)/float64(b.N), "FP")
		b.ReportMetric(f.FPRate(), "FPest")
	})
}

// cpuClock measures the benchmark goroutine's thread CPU time, reported as
// cpu-ns/op next to the wall-clock ns/op.
type cpuClock struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuClock {
	runtime.LockOSThread()
	t, ok := cputime.Thread()
	return cpuClock{t, ok}
}

func (c cpuClock) report(b *testing.B) {
	t, ok := cputime.Thread()
	runtime.UnlockOSThread()
	if c.ok && ok {
		b.ReportMetric(float64(t-c.start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkRandomRead is the floor the filters sit on: one independent
// random 8-byte read per op from a table of the given size, with the same
// key generation (Splitmix64) as BenchmarkFilter, on huge pages where the kernel
// grants them. A blocked filter op costs about one of these; a bloom op k of
// them (overlapped), a cuckoo op two.
func BenchmarkRandomRead(b *testing.B) {
	for _, mb := range []int{16, 160, 1024} {
		b.Run(fmt.Sprintf("%dMiB", mb), func(b *testing.B) {
			w := alignedWords(uint64(mb) << 20 / 8)
			for i := range w {
				w[i] = uint64(i)
			}
			n := uint64(len(w))
			var sum uint64
			cpu := startCPU()
			b.ResetTimer()
			for i := range b.N {
				hi, _ := bits.Mul64(hashmix.Splitmix64(uint64(i)), n)
				sum += w[hi]
			}
			b.StopTimer()
			cpu.report(b)
			if sum == 1 {
				b.Log(sum)
			}
		})
	}
}
