package rotate

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// BenchmarkYoungRing is a fresh ring's first generation: 102k keys added
// (a batch of 256 at a time, as commits do) into a ring sized for 160k, at
// the rate that capacity stands for, then 102k misses probed. It shows the
// cost of growing the first generation from its journal.
func BenchmarkYoungRing(b *testing.B) {
	const capacity, n, batch = 160_000, 102_400, 256
	for _, kind := range []filter.Kind{filter.Blocked, filter.Bloom} {
		b.Run(kind.String(), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			keys := make([]uint64, 2*n)
			for i := range keys {
				keys[i] = rng.Uint64()
			}
			group := make([]int32, batch)
			for i := range group {
				group[i] = int32(i)
			}
			maybe := make([]bool, batch)
			b.ResetTimer()
			for range b.N {
				r, err := New(Options{Window: 4 * time.Hour, Generations: 4, Kind: kind, Capacity: capacity, FalsePositiveRate: 0.01})
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < n; i += batch {
					now := t0.Add(time.Duration(i) * time.Hour / capacity)
					r.Advance(now)
					g, err := r.Active(now)
					if err != nil {
						b.Fatal(err)
					}
					r.Probe(keys[i:i+batch], group, maybe)
					for _, h := range keys[i : i+batch] {
						g.Filter.Add(h)
					}
				}
				for i := n; i < 2*n; i += batch {
					r.Probe(keys[i:i+batch], group, maybe)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2*n), "ns/key")
		})
	}
}
