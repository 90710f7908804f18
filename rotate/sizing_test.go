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
	gens := r.Options().Generations + 1
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
			r, err := New(Options{Window: W, Generations: c.gens, Kind: c.kind, Capacity: perGen, FalsePositiveRate: c.fp})
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

// chainedKinds are the kinds whose rings size generations with sizing.go.
var chainedKinds = filter.Kinds

// feeder adds fresh hashes to rings in step, spread over a generation's
// span, and remembers them with the time they were added.
type feeder struct {
	t     testing.TB
	rings []*Ring
	rng   *rand.Rand
	added []added
}

type added struct {
	h  uint64
	at time.Time
}

// feed adds n hashes spread evenly over [from, from+d).
func (f *feeder) feed(from time.Time, d time.Duration, n int) {
	step := d / time.Duration(n)
	for i := range n {
		at := from.Add(time.Duration(i) * step)
		h := f.rng.Uint64()
		for _, r := range f.rings {
			add(f.t, r, h, at)
		}
		f.added = append(f.added, added{h, at})
	}
}

// check fails on a hash added less than a window before now that a ring
// does not hold, and forgets the hashes older than that.
func (f *feeder) check(now time.Time) {
	f.t.Helper()
	j := 0
	for _, a := range f.added {
		if now.Sub(a.at) >= f.rings[0].Options().Window {
			continue
		}
		for _, r := range f.rings {
			r.Advance(now)
			if !r.Contains(a.h) {
				f.t.Fatalf("%v ring: false negative for a hash added %v before", r.Options().Kind, now.Sub(a.at))
			}
		}
		f.added[j] = a
		j++
	}
	f.added = f.added[:j]
}

// TestFollowsTraffic: of two rings fed the same hashes, one configured for
// 100x the rate that arrives and one for the right rate, the first holds
// at most 2x the filter memory of the second after one generation and
// from then on, sizes new generations for about the rate that arrives, and
// neither loses a hash of the window. A ring told the right rate sizes its
// generations at the configured capacity.
func TestFollowsTraffic(t *testing.T) {
	const gens, perGen = 4, 20_000
	span := time.Hour
	for _, kind := range chainedKinds {
		t.Run(kind.String(), func(t *testing.T) {
			mk := func(capacity uint64) *Ring {
				r, err := New(Options{Window: gens * span, Generations: gens, Kind: kind, Capacity: capacity, FalsePositiveRate: 0.01})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			big, right := mk(100*perGen), mk(perGen+perGen/32)
			f := &feeder{t: t, rings: []*Ring{big, right}, rng: rand.New(rand.NewPCG(7, uint64(kind)))}
			for g := range 3 * gens {
				at := t0.Add(time.Duration(g) * span)
				f.feed(at, span, perGen)
				if g == 0 {
					// While young, the journal (8 bytes a key) is counted.
					t.Logf("first generation: told 100x %d bytes, told right %d", big.FilterBytes(), right.FilterBytes())
				}
				if g >= 1 {
					if b, r := big.FilterBytes(), right.FilterBytes(); b > 2*r {
						t.Fatalf("generation %d: told 100x holds %d filter bytes, told right %d", g, b, r)
					}
				}
				f.check(at.Add(span - time.Nanosecond))
			}
			if s := big.SizedCapacity(); s < perGen || s > 2*perGen {
				t.Errorf("told 100x: new generations sized for %d keys, %d arrive", s, perGen)
			}
			if s := right.SizedCapacity(); s != perGen+perGen/32 {
				t.Errorf("told right: new generations sized for %d keys, want the configured %d", s, perGen+perGen/32)
			}
			t.Logf("end: told 100x %d bytes (sized for %d), told right %d (sized for %d)",
				big.FilterBytes(), big.SizedCapacity(), right.FilterBytes(), right.SizedCapacity())
		})
	}
}

// TestYoungBudget: a ring told the right rate for a heavy stream never
// holds more for its first generation, journal included, than the filter
// the configured capacity takes; the journal ends early and the filter is
// sized for the rate seen, which confirms the configured one: the
// configured capacity here, one filter. (Keys that come all at once
// confirm no rate: TestMemoryFollowsKeys.)
func TestYoungBudget(t *testing.T) {
	const capacity = 400_000
	for _, c := range []struct {
		kind    filter.Kind
		instant bool
	}{{filter.Blocked, false}, {filter.Bloom, false}} {
		kind := c.kind
		r, err := New(Options{Window: 4 * time.Hour, Generations: 4, Kind: kind, Capacity: capacity, FalsePositiveRate: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		full, err := filter.EstimateBytes(kind, capacity, r.PerGenerationFP())
		if err != nil {
			t.Fatal(err)
		}
		f := &feeder{t: t, rings: []*Ring{r}, rng: rand.New(rand.NewPCG(8, uint64(kind)))}
		var peak uint64
		for i := range 40 {
			if c.instant {
				f.feed(t0, 0, capacity/40)
			} else {
				f.feed(t0.Add(time.Duration(i)*time.Hour/40), time.Hour/40, capacity/40)
			}
			peak = max(peak, r.FilterBytes())
		}
		g := r.Generations()[0]
		if peak > full || g.Filter.(filter.Regrower).Journaling() || g.Filter.Capacity() < capacity || g.Filter.Capacity() > capacity+capacity/64 ||
			g.Filter.SizeBytes() > full+64 {
			t.Fatalf("%s (instant %v): first generation peaked at %d bytes (a filter for the configured rate: %d), journaling %v, sized for %d in %d bytes",
				kind, c.instant, peak, full, g.Filter.(filter.Regrower).Journaling(), g.Filter.Capacity(), g.Filter.SizeBytes())
		}
		f.check(t0.Add(time.Hour - 1))
		t.Logf("%s (instant %v): first generation peaked at %.2f of the filter sized for the configured rate", kind, c.instant, float64(peak)/float64(full))
	}
}

// TestMemoryFollowsKeys: a ring told the default rate (Capacity for 562k
// keys a generation, as 10,000 keys/s over a 15-minute span gives one of
// 16 shards) that receives N keys at once, faster than any rate it could
// trust (a file read at a million lines a second, a client's burst),
// holds filters in proportion to N: at most 4x the bytes one filter sized
// for N at the ring's per-generation target takes, plus the journal (8
// bytes a key, 16 while its array doubles) while the first generation
// keeps one, and 4 KiB. No hash is lost across the rebuilds and the
// growth links, and the filter's own estimate of its rate stays at most
// the per-generation target.
func TestMemoryFollowsKeys(t *testing.T) {
	const capacity = 562_500
	for _, kind := range []filter.Kind{filter.Blocked, filter.Bloom} { // cuckoo projects (growYoung)
		r, err := New(Options{Window: time.Hour, Generations: 4, Kind: kind, Capacity: capacity, FalsePositiveRate: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		f := &feeder{t: t, rings: []*Ring{r}, rng: rand.New(rand.NewPCG(11, uint64(kind)))}
		n := 0
		for _, stop := range []int{1_000, 6_000, 12_000, 50_000, 200_000, 600_000} {
			f.feed(t0, 0, stop-n)
			n = stop
			g := r.Generations()[0]
			one, err := filter.EstimateBytes(kind, uint64(n), r.PerGenerationFP())
			if err != nil {
				t.Fatal(err)
			}
			var journal uint64
			if rg := g.Filter.(filter.Regrower); rg.Journaling() {
				journal = rg.JournalBytes()
			}
			got := r.FilterBytes()
			if got > 4*one+journal+4096 || journal > 16*uint64(n)+512 {
				t.Fatalf("%s: %d keys: filters hold %d bytes (journal %d), one filter for them %d: want at most 4x", kind, n, got, journal, one)
			}
			if fp := g.Filter.FPRate(); fp > r.PerGenerationFP() {
				t.Fatalf("%s: %d keys: estimated rate %g over the per-generation target %g", kind, n, fp, r.PerGenerationFP())
			}
			t.Logf("%s: %7d keys: %.2f B/key, %.2fx one filter (journal %d B)", kind, n, float64(got)/float64(n), float64(got-journal)/float64(one), journal)
		}
		f.check(t0.Add(time.Minute))
	}
}

// TestPartialFirstGeneration: a ring that starts 90% into a generation
// sizes the next one from the rate seen in the last 10%, not from the
// keys alone.
func TestPartialFirstGeneration(t *testing.T) {
	const perGen = 50_000
	r, err := New(Options{Window: 4 * time.Hour, Generations: 4, Kind: filter.Blocked, Capacity: 100 * perGen, FalsePositiveRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	f := &feeder{t: t, rings: []*Ring{r}, rng: rand.New(rand.NewPCG(9, 9))}
	f.feed(t0.Add(54*time.Minute), 6*time.Minute, perGen/10)
	f.feed(t0.Add(time.Hour), time.Hour, perGen)
	g := r.Generations()[1]
	if c := g.Filter.Capacity(); c < perGen || c > 2*perGen || len(r.Generations()) != 2 {
		t.Fatalf("second generation sized for %d keys, %d arrive", c, perGen)
	}
	f.check(t0.Add(2*time.Hour - 1))
}

// TestSnapshotOfYoung: a journaling first generation, encoded and decoded
// (a snapshot), holds every hash and grows by chaining in the restored
// ring; the ring it came from keeps journaling.
func TestSnapshotOfYoung(t *testing.T) {
	for _, kind := range chainedKinds {
		r, err := New(Options{Window: 4 * time.Hour, Generations: 4, Kind: kind, Capacity: 1 << 20, FalsePositiveRate: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		f := &feeder{t: t, rings: []*Ring{r}, rng: rand.New(rand.NewPCG(10, uint64(kind)))}
		f.feed(t0, time.Hour/2, 5000)
		g := r.Generations()[0]
		b, err := g.Filter.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		dec, err := filter.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := New(r.Options())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r2.Insert(&Generation{ID: g.ID, Filter: dec}); err != nil {
			t.Fatal(err)
		}
		if dec.(filter.Regrower).Journaling() || !g.Filter.(filter.Regrower).Journaling() {
			t.Fatalf("%s: decoded journaling %v, original %v", kind, dec.(filter.Regrower).Journaling(), g.Filter.(filter.Regrower).Journaling())
		}
		f.rings = append(f.rings, r2)
		f.feed(t0.Add(time.Hour/2), time.Hour/2, 20_000)
		f.check(t0.Add(time.Hour - 1))
		if est := dec.FPRate(); est > r.PerGenerationFP() {
			t.Fatalf("%s: restored generation grown by chaining at FPRate %g, over %g", kind, est, r.PerGenerationFP())
		}
	}
}
