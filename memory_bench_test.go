package dedup_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

// BenchmarkMemoryPerKey fills an engine in steady state (two windows of a
// virtual clock at the rate its filters are sized for, so generations
// rotate and expire as in production) and reports the memory per
// remembered key (the keys of the last Window): filter bytes, and Go heap
// (filters plus everything else the engine holds). It also reports the
// filters' estimated FP and the store lookups per million new keys.
func BenchmarkMemoryPerKey(b *testing.B) {
	const perWindow = 2_000_000
	for _, fp := range []float64{0.01, 0.001} {
		for _, kind := range []string{"blocked", "bloom", "cuckoo", "interleaved", "wide"} {
			for _, gens := range []int{4, 8} {
				b.Run(fmt.Sprintf("%s/fp=%g/gens=%d", kind, fp, gens), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						memoryPerKey(b, kind, fp, gens, perWindow)
					}
				})
			}
		}
	}
}

func memoryPerKey(b *testing.B, kind string, fp float64, gens, perWindow int) {
	clk := testclock.New(t0)
	const W = time.Hour
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := Open(Options{Filter: kind, FalsePositiveRate: fp, Generations: gens, Probabilistic: true,
		Window: W, ExpectedRate: float64(perWindow) / W.Seconds(), Now: clk.Now, MaxInFlight: 1 << 22})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const batch = 4096
	keys := make([][]byte, batch)
	for i := range keys {
		keys[i] = make([]byte, 16)
	}
	out := make([]Verdict, batch)
	step := W / time.Duration(perWindow)
	for n := 0; n < 2*perWindow; n += batch {
		clk.Advance(batch * step)
		for i := range keys {
			binary.LittleEndian.PutUint64(keys[i], uint64(n+i))
			binary.LittleEndian.PutUint64(keys[i][8:], 0xfeed)
		}
		if err := e.ObserveBatch(keys, out); err != nil {
			b.Fatal(err)
		}
		if err := e.Commit(nil); err != nil {
			b.Fatal(err)
		}
	}
	st := e.Stats()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// Probe fresh keys: the measured false-positive rate of a new key.
	fps, probes := 0, 200_000
	for n := 0; n < probes; n += batch {
		for i := range keys {
			binary.LittleEndian.PutUint64(keys[i], uint64(n+i))
			binary.LittleEndian.PutUint64(keys[i][8:], 0xbeef)
		}
		if err := e.ObserveBatch(keys, out); err != nil {
			b.Fatal(err)
		}
		for _, v := range out {
			if v == Duplicate {
				fps++
			}
		}
	}
	b.ReportMetric(float64(st.FilterBytes)/float64(perWindow), "filterB/key")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(perWindow), "heapB/key")
	b.ReportMetric(st.EstimatedFPRate, "estFP")
	b.ReportMetric(float64(fps)/float64(probes+probes%batch), "measuredFP")
}
