package rotate

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// ringKinds are the kinds a ring is tested with: the chained backends and
// the interleaved lane tables.
var ringKinds = append(filter.Kinds[:len(filter.Kinds):len(filter.Kinds)], filter.Interleaved, filter.Wide, filter.Fuse)

var t0 = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

func newRing(t testing.TB, kind filter.Kind, capacity uint64) *Ring {
	t.Helper()
	r, err := New(Options{Window: 80 * time.Second, Generations: 8, Kind: kind, Capacity: capacity, FalsePositiveRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func add(t testing.TB, r *Ring, h uint64, now time.Time) {
	t.Helper()
	r.Advance(now)
	g, err := r.Active(now)
	if err != nil {
		t.Fatal(err)
	}
	g.Filter.Add(h)
}

// TestWindowEdges: a hash is present at W - epsilon and gone at
// W + W/N + epsilon, whatever its offset inside its generation.
func TestWindowEdges(t *testing.T) {
	for _, kind := range ringKinds {
		t.Run(kind.String(), func(t *testing.T) {
			r := newRing(t, kind, 1000)
			W, span := 80*time.Second, 10*time.Second
			for i, off := range []time.Duration{0, time.Nanosecond, span / 2, span - time.Nanosecond} {
				h := uint64(0x9e3779b97f4a7c15) * uint64(i+1)
				at := t0.Add(time.Duration(i) * 3 * W).Add(off)
				add(t, r, h, at)
				r.Advance(at.Add(W - time.Nanosecond))
				if !r.Contains(h) {
					t.Fatalf("offset %v: gone at W - 1ns", off)
				}
				r.Advance(at.Add(W + span + time.Nanosecond))
				if r.Contains(h) {
					t.Fatalf("offset %v: still there at W + W/N + 1ns", off)
				}
			}
		})
	}
}

func TestLiveGenerations(t *testing.T) {
	r := newRing(t, filter.Blocked, 100)
	for i := 0; i < 100; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		add(t, r, uint64(i), now)
		if r.Len() > 9 {
			t.Fatalf("%d live generations, want at most N+1 = 9", r.Len())
		}
	}
	if r.Len() != 9 {
		t.Fatalf("%d live generations in steady state, want 9", r.Len())
	}
	gens := r.Generations()
	for i := 1; i < len(gens); i++ {
		if gens[i].ID <= gens[i-1].ID {
			t.Fatal("generations not ascending")
		}
	}
	// Expiring everything empties the ring.
	if exp := r.Advance(t0.Add(time.Hour)); len(exp) != 9 || r.Len() != 0 {
		t.Fatalf("expired %v, %d left", exp, r.Len())
	}
}

func TestClockBackwards(t *testing.T) {
	r := newRing(t, filter.Bloom, 100)
	add(t, r, 1, t0)
	newest := r.Generations()[0].ID
	// A step far back expires nothing, creates no older generation.
	for _, back := range []time.Duration{time.Second, time.Hour, 100 * 365 * 24 * time.Hour} {
		past := t0.Add(-back)
		if exp := r.Advance(past); exp != nil {
			t.Fatalf("stepping back %v expired %v", back, exp)
		}
		g, err := r.Active(past)
		if err != nil {
			t.Fatal(err)
		}
		if g.ID != newest {
			t.Fatalf("stepping back %v: Active = %d, want the newest %d", back, g.ID, newest)
		}
		g.Filter.Add(2)
	}
	// Before the epoch too.
	if _, err := r.Active(time.Unix(-5, 0)); err != nil {
		t.Fatal(err)
	}
	if !r.Contains(1) || !r.Contains(2) || r.Len() != 1 {
		t.Fatal("a backwards clock lost or split generations")
	}
}

// TestNoFalseNegatives adds a stream far faster than the capacity (so every
// generation grows many times) over many rotations and checks every hash
// still inside the window against an exact oracle.
func TestNoFalseNegatives(t *testing.T) {
	for _, kind := range ringKinds {
		t.Run(kind.String(), func(t *testing.T) {
			r := newRing(t, kind, 1000)
			rng := rand.New(rand.NewPCG(1, uint64(kind)))
			type entry struct {
				h  uint64
				at time.Time
			}
			var live []entry
			now := t0
			const n = 400_000
			for i := 0; i < n; i++ {
				now = now.Add(time.Millisecond) // 400 s: five windows
				h := rng.Uint64()
				add(t, r, h, now)
				live = append(live, entry{h, now})
				if i%50_000 == 49_999 {
					j := 0
					for _, e := range live {
						if now.Sub(e.at) < 80*time.Second {
							if !r.Contains(e.h) {
								t.Fatalf("false negative: hash added %v ago", now.Sub(e.at))
							}
							live[j] = e
							j++
						}
					}
					live = live[:j]
				}
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, c := range []Options{
		{},
		{Window: time.Second, Generations: -1},
		{Window: 3, Generations: 8},
		{Window: time.Second, FalsePositiveRate: 2},
		{Window: time.Second, Kind: 99},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// TestRingFP: a miss across a full ring stays within the target.
func TestRingFP(t *testing.T) {
	for _, kind := range ringKinds {
		t.Run(kind.String(), func(t *testing.T) {
			r, err := New(Options{Window: 80 * time.Second, Generations: 8, Kind: kind, Capacity: 20000, FalsePositiveRate: 0.01})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(2, uint64(kind)))
			now := t0
			for i := 0; i < 9*20000; i++ {
				now = now.Add(time.Second * 90 / (9 * 20000))
				add(t, r, rng.Uint64(), now)
			}
			const probes = 200_000
			fp := 0
			for i := 0; i < probes; i++ {
				if r.Contains(rng.Uint64()) {
					fp++
				}
			}
			rate := float64(fp) / probes
			// Bound: target 1% + 4 binomial sigmas (sigma = sqrt(p(1-p)/n) ~ 0.00022).
			if rate > 0.01+4*0.00022 {
				t.Fatalf("ring FP %.4f over target 1%%", rate)
			}
			t.Logf("%s ring of %d generations: FP %.4f", kind, r.Len(), rate)
		})
	}
}

func BenchmarkRing(b *testing.B) {
	for _, kind := range ringKinds {
		for _, perGen := range []uint64{125_000, 1_250_000} {
			b.Run(fmt.Sprintf("%s/keys=%d", kind, 8*perGen), func(b *testing.B) {
				r, err := New(Options{Window: 80 * time.Second, Generations: 8, Kind: kind, Capacity: perGen, FalsePositiveRate: 0.01})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(3, 3))
				now := t0
				step := 90 * time.Second / time.Duration(9*perGen)
				for i := uint64(0); i < 9*perGen; i++ {
					now = now.Add(step)
					add(b, r, rng.Uint64(), now)
				}
				var bytes uint64
				for _, g := range r.Generations() {
					bytes += g.Filter.SizeBytes()
				}
				b.ResetTimer()
				hits := 0
				for i := 0; i < b.N; i++ {
					// The engine's path for a new key: a miss across the ring.
					if r.Contains(rng.Uint64()) {
						hits++
					}
				}
				b.ReportMetric(float64(hits)/float64(b.N), "FP")
				b.ReportMetric(float64(bytes)/float64(9*perGen), "bytes/key")
			})
		}
	}
}
