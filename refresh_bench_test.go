package dedup_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// BenchmarkRefresh measures the sliding window's cost per key against the
// fixed one's, exact and probabilistic: batches of 1,000 keys at 1,000 keys
// a second of event time, half of them new, half repeats of keys seen up
// to 50 s before (within the 1-minute window: duplicates, each renewed
// under Refresh), a commit after each batch. Compare the ns/key of
// window=refresh with window=fixed of the same mode, from one run.
func BenchmarkRefresh(b *testing.B) {
	for _, prob := range []bool{false, true} {
		mode := "exact"
		if prob {
			mode = "probabilistic"
		}
		for _, refresh := range []bool{false, true} {
			win := "fixed"
			if refresh {
				win = "refresh"
			}
			b.Run(fmt.Sprintf("mode=%s/window=%s", mode, win), func(b *testing.B) {
				e := openT(b, Options{Window: time.Minute, EventTime: true, Probabilistic: prob, Refresh: refresh})
				const batch = 1000
				keys := make([][]byte, batch)
				out := make([]Verdict, batch)
				rng := rand.New(rand.NewPCG(1, 2))
				next := 0
				var dups int
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range keys {
						k := next
						if j%2 == 1 && next > 0 {
							k = next - 1 - rng.IntN(min(next, 25_000)) // up to 50 s back
						} else {
							next++
						}
						keys[j] = strconv.AppendInt(keys[j][:0], int64(k), 10)
					}
					at := t0.Add(time.Duration(i) * time.Second)
					if err := e.ObserveBatchAt(keys, at, out); err != nil {
						b.Fatal(err)
					}
					for _, v := range out {
						if v == Duplicate {
							dups++
						}
					}
					if err := e.Commit(nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/key")
				b.ReportMetric(float64(dups)/float64(b.N*batch), "dups/key")
			})
		}
	}
}
