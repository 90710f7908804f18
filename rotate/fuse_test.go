package rotate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// TestFuseSplit: the split meets the target at the peak (N sealed
// generations at 2^-w, with their overflow's share, and the newest at its
// target) and uses most of it.
func TestFuseSplit(t *testing.T) {
	for _, c := range []struct {
		fp   float64
		gens int
	}{{0.01, 4}, {0.01, 8}, {0.001, 4}, {0.05, 2}, {0.01, 1}} {
		w, a := fuseSplit(c.fp, c.gens)
		peak := 1 - (1-a)*math.Pow(1-math.Ldexp(1, -w)*(1+fuseLateShare), float64(c.gens))
		if peak > c.fp*(1+1e-9) || peak < 0.9*c.fp || a <= 0 {
			t.Errorf("fp %g, %d generations: width %d, newest %g: peak %g", c.fp, c.gens, w, a, peak)
		}
		t.Logf("fp %g, N %d: width %d (sealed %.5f), newest %.5f", c.fp, c.gens, w, math.Ldexp(1, -w), a)
	}
}

// TestFuseFPOnTarget fills a Fuse ring to its peak (the newest generation
// full, N sealed ones) and measures the false-positive rate of never-seen
// hashes, and the bytes a window key the filters take (the newest generation's
// spool apart, and with it).
func TestFuseFPOnTarget(t *testing.T) {
	const perGen = 100_000
	for _, c := range []struct {
		fp     float64
		gens   int
		probes int
	}{{0.01, 4, 2_000_000}, {0.01, 8, 2_000_000}} {
		t.Run(fmt.Sprintf("fp=%g/gens=%d", c.fp, c.gens), func(t *testing.T) {
			probes := c.probes
			if testing.Short() {
				probes /= 4
			}
			r, err := New(Options{Window: time.Duration(c.gens) * time.Hour, Generations: c.gens, Kind: filter.Fuse, Capacity: perGen, FalsePositiveRate: c.fp})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(5, uint64(c.gens)))
			fillWindow(t, r, rng, t0, perGen)
			var tables, journal uint64
			for i, g := range r.Generations() {
				_, sealed := g.Filter.(*filter.FuseFilter)
				if sealed != (i < r.Len()-1) {
					t.Fatalf("generation %d of %d: sealed %v", i, r.Len(), sealed)
				}
				tables += g.Filter.SizeBytes()
				journal += journalBytes(g.Filter)
			}
			if r.FilterBytes() != tables+journal {
				t.Errorf("FilterBytes %d, want tables %d + journal %d", r.FilterBytes(), tables, journal)
			}
			pos := 0
			for range probes {
				if r.Contains(rng.Uint64()) {
					pos++
				}
			}
			got := float64(pos) / float64(probes)
			sigma := math.Sqrt(got * (1 - got) / float64(probes))
			est := ringFPModel(r)
			keys := float64(c.gens * perGen)
			w, a := r.FuseWidth()
			t.Logf("width %d, newest at %.5f: measured %.5f (%.3f of the target), estimate %.5f; %.3f bytes a window key in filters, %.3f with the newest's spool in memory",
				w, a, got, got/c.fp, est, float64(tables)/keys, float64(tables+journal)/keys)
			if got < 0.9*c.fp-4*sigma || got > c.fp+4*sigma {
				t.Errorf("measured FP %.5f outside [0.9, 1.0] x %g (+-4 sigma, sigma %.5f)", got, c.fp, sigma)
			}
			if est > c.fp {
				t.Errorf("estimate %.5f over the target %g", est, c.fp)
			}
		})
	}
}

// TestFuseLateAndRestore: hashes added to a generation after it is sealed
// (late commits) are held; every generation survives MarshalBinary,
// Unmarshal and Insert into a new ring; the restored newest generation,
// which has no spool, stays a blocked filter and is never sealed, and a
// generation the new ring makes is sealed in its turn.
func TestFuseLateAndRestore(t *testing.T) {
	cfg := Options{Window: 4 * time.Hour, Generations: 4, Kind: filter.Fuse, Capacity: 4096, FalsePositiveRate: 0.01}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &feeder{t: t, rings: []*Ring{r}, rng: rand.New(rand.NewPCG(11, 1))}
	f.feed(t0, 3*time.Hour+time.Hour/2, 20_000)
	now := t0.Add(3*time.Hour + time.Hour/2)
	// Late hashes into every sealed generation.
	for _, g := range r.Generations()[:r.Len()-1] {
		if _, ok := g.Filter.(*filter.FuseFilter); !ok {
			t.Fatalf("generation %d not sealed at %v", g.ID, now)
		}
		for range 500 {
			h := f.rng.Uint64()
			if ok, err := r.Add(g.ID, h, now); err != nil || !ok {
				t.Fatalf("late Add: %v %v", ok, err)
			}
			f.added = append(f.added, added{h: h, at: r.Start(g.ID)})
		}
		if g.Filter.(*filter.FuseFilter).Late() == nil {
			t.Fatalf("generation %d: no overflow after late adds", g.ID)
		}
	}
	f.check(now)
	r2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range r.Generations() {
		b, err := g.Filter.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		dec, err := filter.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if dec.Kind() != g.Filter.Kind() {
			t.Fatalf("generation %d: decoded %v, was %v", g.ID, dec.Kind(), g.Filter.Kind())
		}
		if _, err := r2.Insert(&Generation{ID: g.ID, Filter: dec}); err != nil {
			t.Fatal(err)
		}
	}
	f.rings = []*Ring{r, r2}
	f.check(now)
	newest := r2.Generations()[r2.Len()-1]
	f.feed(now, 2*time.Hour, 20_000)
	f.check(now.Add(2 * time.Hour))
	if _, ok := newest.Filter.(*filter.FuseFilter); ok {
		t.Fatal("the restored newest generation, without a spool, was sealed")
	}
	sealed := 0
	for _, g := range r2.Generations() {
		if _, ok := g.Filter.(*filter.FuseFilter); ok && g.ID > newest.ID {
			sealed++
		}
	}
	if sealed == 0 {
		t.Fatal("no generation made after the restore was sealed")
	}
}

// failingSpool fails its Append after limit hashes, or its Hashes.
type failingSpool struct {
	memSpool
	limit      int
	failHashes bool
}

func (f *failingSpool) Append(h uint64) error {
	if len(f.hs) >= f.limit {
		return errors.New("disk full")
	}
	return f.memSpool.Append(h)
}

func (f *failingSpool) Hashes() ([]uint64, error) {
	if f.failHashes {
		return nil, errors.New("read error")
	}
	return f.memSpool.Hashes()
}

// TestFuseSpoolErrors: a spool that fails (on append, while the blocked
// filter regrows from it, or when it is read back to seal) leaves its
// generation a blocked filter that holds every hash: more memory, no key
// lost.
func TestFuseSpoolErrors(t *testing.T) {
	for _, c := range []struct {
		name       string
		limit      int
		failHashes bool
	}{{"append", 3000, false}, {"append-early", 10, false}, {"hashes", 1 << 30, true}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Options{Window: 4 * time.Hour, Generations: 4, Kind: filter.Fuse, Capacity: 4096, FalsePositiveRate: 0.01,
				NewSpool: func(uint64) (Spool, error) { return &failingSpool{limit: c.limit, failHashes: c.failHashes}, nil }}
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			f := &feeder{t: t, rings: []*Ring{r}, rng: rand.New(rand.NewPCG(12, uint64(c.limit)))}
			f.feed(t0, 3*time.Hour, 30_000)
			f.check(t0.Add(3 * time.Hour))
			sealed, failed := r.FuseSeals()
			for _, g := range r.Generations()[:r.Len()-1] {
				if _, ok := g.Filter.(*filter.FuseFilter); ok {
					t.Fatalf("generation %d sealed from a failed spool", g.ID)
				}
			}
			t.Logf("sealed %d, failed %d", sealed, failed)
			if failed == 0 {
				t.Fatal("no seal failure counted")
			}
		})
	}
	// A spool that cannot be made leaves the generation blocked, counted.
	r, err := New(Options{Window: time.Hour, Generations: 4, Kind: filter.Fuse, Capacity: 10, FalsePositiveRate: 0.01,
		NewSpool: func(uint64) (Spool, error) { return nil, errors.New("no spool") }})
	if err != nil {
		t.Fatal(err)
	}
	f := &feeder{t: t, rings: []*Ring{r}, rng: rand.New(rand.NewPCG(13, 1))}
	f.feed(t0, 40*time.Minute, 3000)
	f.check(t0.Add(40 * time.Minute))
	if sealed, failed := r.FuseSeals(); sealed != 0 || failed == 0 {
		t.Fatalf("with no spool: sealed %d, failed %d", sealed, failed)
	}
}
