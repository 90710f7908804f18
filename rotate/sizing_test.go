package rotate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// fillWindow adds perGen fresh hashes to each of the gens+1 generations of
// r, spread evenly over their spans starting at start, and returns the
// time just before the last generation ends: every generation is live and
// holds its keys (the peak of the ring's false-positive rate).
func fillWindow(t testing.TB, r *Ring, rng *rand.Rand, start time.Time, perGen int) time.Time {
	t.Helper()
	span := r.Span()
	gens := r.Config().Generations + 1
	step := span / time.Duration(perGen)
	now := start
	for g := range gens {
		for i := range perGen {
			now = start.Add(time.Duration(g)*span + time.Duration(i)*step)
			add(t, r, rng.Uint64(), now)
		}
	}
	end := start.Add(time.Duration(gens)*span - time.Nanosecond)
	r.Advance(end)
	if r.Len() != gens {
		t.Fatalf("%d live generations at the end of the window, want %d", r.Len(), gens)
	}
	return end
}

// ringFPModel is the ring's own estimate of a miss's false-positive rate:
// 1 - prod(1 - FPRate) over the live generations.
func ringFPModel(r *Ring) float64 {
	q := 1.0
	for _, g := range r.Generations() {
		q *= 1 - g.Filter.FPRate()
	}
	return 1 - q
}

// TestFPOnTarget fills every live generation of a ring to the capacity the
// configured rate gives (the peak, just before a rotation) and measures the
// false-positive rate of never-seen hashes across all of them. It must be
// on the target: within [0.9, 1.0] x fp, and the filters' own estimate
// within 3% of the measure.
//
// Statistical bound: with P probes at rate q the measure has a binomial
// deviation sigma = sqrt(q(1-q)/P); P = 2M at 1% gives sigma = 0.7% of q,
// 1.6M at 0.1% sigma = 2.5% of q. The bounds are widened by 4 sigma (a
// false failure about once in 30,000 runs), and the estimate's by 3% for
// the models' own error (the blocked model treats words as independent).
// The filters' realisations add a variance of their own, far smaller at
// these sizes (their bits are a sum over 100k-key loads).
func TestFPOnTarget(t *testing.T) {
	type tc struct {
		kind   filter.Kind
		fp     float64
		gens   int
		probes int
	}
	var cases []tc
	for _, kind := range []filter.Kind{filter.Blocked, filter.Bloom} {
		cases = append(cases, tc{kind, 0.01, 4, 2_000_000}, tc{kind, 0.001, 4, 16_000_000}, tc{kind, 0.01, 8, 2_000_000})
	}
	const perGen = 100_000
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/fp=%g/gens=%d", c.kind, c.fp, c.gens), func(t *testing.T) {
			t.Parallel()
			probes := c.probes
			if testing.Short() {
				probes /= 4
			}
			W := time.Duration(c.gens) * time.Hour
			r, err := New(Config{Window: W, Generations: c.gens, Kind: c.kind, Capacity: perGen, FalsePositiveRate: c.fp})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(c.kind), uint64(c.gens)))
			fillWindow(t, r, rng, t0, perGen)
			var keys uint64
			for _, g := range r.Generations() {
				keys += g.Filter.Count()
				if g.Filter.Capacity() < perGen || g.Filter.Capacity() > perGen+perGen/50 {
					t.Errorf("generation %d sized for %d keys, %d arrived", g.ID, g.Filter.Capacity(), perGen)
				}
			}
			pos := 0
			for range probes {
				if r.Contains(rng.Uint64()) {
					pos++
				}
			}
			got := float64(pos) / float64(probes)
			est := ringFPModel(r)
			sigma := math.Sqrt(got * (1 - got) / float64(probes))
			t.Logf("measured %.5f (%.3f of the target), estimate %.5f, %.3f bytes per window key (%d generations' filters for %d)",
				got, got/c.fp, est, float64(r.FilterBytes())/float64(c.gens*perGen), r.Len(), c.gens)
			if got < 0.9*c.fp-4*sigma || got > c.fp+4*sigma {
				t.Errorf("measured FP %.5f outside [0.9, 1.0] x %g (+-4 sigma, sigma %.5f)", got, c.fp, sigma)
			}
			if math.Abs(got-est) > 0.03*est+4*sigma {
				t.Errorf("measured FP %.5f, estimate %.5f: more than 3%% + 4 sigma apart", got, est)
			}
			if est > c.fp {
				t.Errorf("estimate %.5f over the target %g", est, c.fp)
			}
		})
	}
}
