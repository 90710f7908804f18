package rotate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// BenchmarkStaticLayouts measures, at the peak of a ring of 4 generations
// of perGen keys at a 1% target (4 full past generations and a full
// newest one), three layouts side by side:
//
//   - blocked: 5 blocked filters at PerGenerationFP (today's default);
//   - pergen: what Kind fuse does, one fuse filter per past generation at
//     fuseSplit's width and the newest blocked at its target;
//   - combined: one fuse filter over all 4 past generations (rebuilt at
//     every rotation from their hashes), the newest blocked: 2^-w once,
//     not 4 times, so a narrower width (7) meets the target.
//
// Reported per layout: filter bytes per window key (4*perGen keys), the
// measured false-positive rate over the target, ns per probe of a new key
// (filter by filter over a batch, prefetching ahead, as Ring.Probe does),
// and ns per key to build the static part.
//
//	go test -run '^$' -bench BenchmarkStaticLayouts -benchtime=4000000x ./rotate
func BenchmarkStaticLayouts(b *testing.B) {
	const gens, fp = 4, 0.01
	perGen := 4 << 20
	if testing.Short() {
		perGen = 1 << 20
	}
	rng := rand.New(rand.NewPCG(1, 2))
	past := make([][]uint64, gens)
	for i := range past {
		past[i] = make([]uint64, perGen)
		for j := range past[i] {
			past[i][j] = rng.Uint64()
		}
	}
	newest := make([]uint64, perGen)
	for j := range newest {
		newest[j] = rng.Uint64()
	}
	blockedAt := func(p float64, hs []uint64) filter.Filter {
		f, err := filter.New(filter.Blocked, uint64(len(hs)), p)
		if err != nil {
			b.Fatal(err)
		}
		for _, h := range hs {
			f.Add(h)
		}
		return f
	}
	type layout struct {
		name    string
		filters []filter.Filter
		build   time.Duration // of the static part
	}
	var layouts []layout
	{
		p := PerGenerationFP(fp, gens)
		l := layout{name: "blocked"}
		for _, hs := range append(past[:gens:gens], newest) {
			l.filters = append(l.filters, blockedAt(p, hs))
		}
		layouts = append(layouts, l)
	}
	{
		w, a := fuseSplit(fp, gens)
		l := layout{name: "pergen"}
		for _, hs := range past {
			t0 := time.Now()
			f, err := filter.BuildFuse(append([]uint64(nil), hs...), w, 1e-4)
			l.build += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			l.filters = append(l.filters, f)
		}
		l.filters = append(l.filters, blockedAt(a, newest))
		layouts = append(layouts, l)
	}
	{
		const w = 7
		a := 1 - (1-fp)/(1-math.Ldexp(1, -w))
		var all []uint64
		for _, hs := range past {
			all = append(all, hs...)
		}
		t0 := time.Now()
		f, err := filter.BuildFuse(all, w, 1e-4)
		l := layout{name: "combined", build: time.Since(t0)}
		if err != nil {
			b.Fatal(err)
		}
		l.filters = []filter.Filter{f, blockedAt(a, newest)}
		layouts = append(layouts, l)
	}
	const batch = 1024
	probes := make([]uint64, batch)
	maybe := make([]bool, batch)
	for _, l := range layouts {
		var bytes uint64
		for _, f := range l.filters {
			bytes += f.SizeBytes()
		}
		pos, n := 0, 0
		t0 := time.Now()
		for n < b.N {
			for i := range probes {
				probes[i] = rng.Uint64()
			}
			clear(maybe)
			for _, f := range l.filters {
				pf := f.(filter.Prefetcher)
				for i := range probeAhead {
					pf.Prefetch(probes[i])
				}
				for i, h := range probes {
					if i+probeAhead < batch {
						pf.Prefetch(probes[i+probeAhead])
					}
					maybe[i] = maybe[i] || f.Test(h)
				}
			}
			for _, m := range maybe {
				if m {
					pos++
				}
			}
			n += batch
		}
		el := time.Since(t0)
		b.ReportMetric(float64(bytes)/float64(gens*perGen), l.name+"-B/key")
		b.ReportMetric(float64(pos)/float64(n)/fp, l.name+"-FP/target")
		b.ReportMetric(float64(el.Nanoseconds())/float64(n), l.name+"-ns/probe")
		if l.build > 0 {
			b.ReportMetric(float64(l.build.Nanoseconds())/float64(gens*perGen), l.name+"-build-ns/key")
		}
	}
}
