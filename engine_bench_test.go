package dedup_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// benchKeys returns n 16-byte keys; about dupShare of them repeat a key
// from up to 4096 positions earlier.
func benchKeys(n int, dupShare float64, seed uint64) [][]byte {
	keys := make([][]byte, n)
	buf := make([]byte, 16*n)
	x := seed*0x9e3779b97f4a7c15 + 1
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := range keys {
		if i > 4096 && float64(next()%10000) < dupShare*10000 {
			keys[i] = keys[i-1-int(next()%4096)]
			continue
		}
		k := buf[16*i : 16*i+16]
		binary.LittleEndian.PutUint64(k, next())
		binary.LittleEndian.PutUint64(k[8:], next())
		keys[i] = k
	}
	return keys
}

// BenchmarkObserveBatch measures ObserveBatch throughput on all cores with
// 2% duplicates, for each mode and backend. Exact mode runs on a real
// state directory with AutoCommit every 100ms, so the store's write path
// is inside the measurement.
func BenchmarkObserveBatch(b *testing.B) {
	for _, mode := range []string{"probabilistic", "exact"} {
		for _, kind := range []string{"blocked", "bloom", "cuckoo", "interleaved", "wide"} {
			b.Run(fmt.Sprintf("%s/%s", mode, kind), func(b *testing.B) {
				benchObserve(b, mode == "probabilistic", kind, 1024)
			})
		}
	}
}

// BenchmarkObserve is the single-key path, probabilistic and exact.
func BenchmarkObserve(b *testing.B) {
	for _, mode := range []string{"probabilistic", "exact"} {
		b.Run(mode, func(b *testing.B) { benchObserve(b, mode == "probabilistic", "blocked", 1) })
	}
}

// BenchmarkObserveGenerations shows the price of generations: a new key
// is tested against every live one.
func BenchmarkObserveGenerations(b *testing.B) {
	for _, gens := range []int{2, 4, 8, 16} {
		b.Run(fmt.Sprintf("gens=%d", gens), func(b *testing.B) {
			benchObserveOpts(b, Options{Probabilistic: true, Generations: gens}, 1024)
		})
	}
}

func benchObserve(b *testing.B, prob bool, kind string, batch int) {
	benchObserveOpts(b, Options{Filter: kind, Probabilistic: prob}, batch)
}

func benchObserveOpts(b *testing.B, o Options, batch int) {
	prob := o.Probabilistic
	o.ExpectedRate, o.Window = 1e6, 10*time.Second
	o.AutoCommit, o.MaxInFlight = 100*time.Millisecond, 1<<24
	o.SnapshotInterval = -1 // the deferred Close is timed: no snapshot in it
	if !prob {
		o.Dir = b.TempDir()
	}
	e, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	workers := runtime.GOMAXPROCS(0)
	per := b.N/workers + batch
	streams := make([][][]byte, workers)
	for w := range streams {
		streams[w] = benchKeys(per, 0.02, uint64(w+1))
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		w := int(next.Add(1) - 1)
		keys := streams[w%workers]
		out := make([]Verdict, batch)
		i := 0
		for pb.Next() {
			if batch == 1 {
				if _, err := e.Observe(keys[i%len(keys)]); err != nil {
					b.Error(err)
					return
				}
				i++
				continue
			}
			// One iteration = one key; a batch is flushed every batch keys.
			i++
			if i%batch == 0 {
				lo := (i - batch) % (len(keys) - batch)
				if err := e.ObserveBatch(keys[lo:lo+batch], out); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	if err := e.Commit(nil); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	st := e.Stats()
	b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mkeys/s")
	if st.New > 0 {
		b.ReportMetric(float64(st.FilterBytes)/float64(st.FilterKeys+1), "filterB/key")
		b.ReportMetric(float64(st.StoreLookups)/float64(st.New)*1e6, "lookups/Mnew")
	}
}
