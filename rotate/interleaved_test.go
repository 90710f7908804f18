package rotate

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// laneKinds are the kinds whose rings share lane tables: every TestLanes
// test runs with each (a subtest per kind, which newLaneRing reads).
var laneKinds = []filter.Kind{filter.Interleaved, filter.Wide}

func forLaneKinds(t *testing.T, test func(t *testing.T)) {
	for _, k := range laneKinds {
		t.Run(k.String(), test)
	}
}

// laneKindOf returns the lane kind of the forLaneKinds subtest t runs in.
func laneKindOf(t testing.TB) filter.Kind {
	if strings.Contains(t.Name(), "/"+filter.Wide.String()) {
		return filter.Wide
	}
	return filter.Interleaved
}

func newLaneRing(t testing.TB, gens int, capacity uint64) *Ring {
	t.Helper()
	r, err := New(Options{Window: time.Duration(gens) * 10 * time.Second, Generations: gens, Kind: laneKindOf(t), Capacity: capacity, FalsePositiveRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLanesOracle drives an interleaved ring through many rotations with a
// clock that jitters backwards, against an exact record of when each hash
// was added: a hash added at t is present at every probe before t + W, and
// every batch Probe agrees with Contains. Lanes are reused: the ring keeps
// one table throughout.
func TestLanesOracle(t *testing.T) { forLaneKinds(t, testLanesOracle) }

func testLanesOracle(t *testing.T) {
	// About 2000 hashes per generation: the lanes are sized for 3000, so the
	// measured rate asks for no other table.
	r := newLaneRing(t, 4, 3000)
	W := 40 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	type rec struct {
		h  uint64
		at time.Time
	}
	var added []rec
	now := t0
	for step := range 4000 {
		now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
		at := now
		if rng.IntN(10) == 0 {
			at = now.Add(-time.Duration(rng.IntN(3000)) * time.Millisecond) // a late clock
		}
		r.Advance(at)
		g, err := r.Active(at)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			h := rng.Uint64()
			g.Filter.Add(h)
			added = append(added, rec{h, at})
		}
		if step%50 != 0 {
			continue
		}
		r.Advance(now)
		hs := make([]uint64, 0, len(added))
		for _, a := range added {
			if now.Sub(a.at) < W {
				hs = append(hs, a.h)
			}
		}
		group := make([]int32, len(hs))
		for i := range group {
			group[i] = int32(i)
		}
		maybe := make([]bool, len(hs))
		r.Probe(hs, group, maybe)
		for i, h := range hs {
			if !maybe[i] || !r.Contains(h) {
				t.Fatalf("step %d: hash %#x lost (probe %v, contains %v)", step, h, maybe[i], r.Contains(h))
			}
		}
		// Drop records long expired, to keep the check cheap.
		keep := added[:0]
		for _, a := range added {
			if now.Sub(a.at) < 2*W {
				keep = append(keep, a)
			}
		}
		added = keep
	}
	// The first generation's table grows from 1024 and is settled once.
	s, ok := r.LaneTables()
	if !ok || s.Tables != 1 || s.Resized > 1 {
		t.Fatalf("lane tables %+v, want one, resized at most when the first generation settled", s)
	}
}

// TestLanesFollowTraffic: a ring sized for 100x its real rate grows its
// table with its first generation and settles it from the measured rate,
// ending within 2x of the memory of a ring sized right; one whose rate
// then rises 20x grows back, losing nothing.
func TestLanesFollowTraffic(t *testing.T) { forLaneKinds(t, testLanesFollowTraffic) }

func testLanesFollowTraffic(t *testing.T) {
	const gens, rate = 4, 20_000 // keys per generation
	big := newLaneRing(t, gens, 100*rate)
	right := newLaneRing(t, gens, rate)
	span := 10 * time.Second
	rng := rand.New(rand.NewPCG(3, 4))
	var last []uint64
	feed := func(g int, n int) {
		at := t0.Add(time.Duration(g) * span)
		last = last[:0]
		for _, r := range []*Ring{big, right} {
			r.Advance(at)
		}
		for range n {
			h := rng.Uint64()
			last = append(last, h)
			for _, r := range []*Ring{big, right} {
				gen, err := r.Active(at)
				if err != nil {
					t.Fatal(err)
				}
				gen.Filter.Add(h)
			}
		}
	}
	for g := range 3 * gens {
		feed(g, rate)
	}
	sb, _ := big.LaneTables()
	sr, _ := right.LaneTables()
	t.Logf("sized 100x: %+v; sized right: %+v", sb, sr)
	if sb.Tables != 1 || sb.Resized > 1 || sb.Bytes > 2*sr.Bytes {
		t.Fatalf("ring sized 100x holds %d tables, %d bytes (resized %d); the right one %d bytes", sb.Tables, sb.Bytes, sb.Resized, sr.Bytes)
	}
	// A 20x burst in one generation: its lane overflows, nothing is lost.
	feed(3*gens, 20*rate)
	for _, h := range last {
		if !big.Contains(h) {
			t.Fatalf("burst hash %#x lost", h)
		}
	}
	// The next generation is sized from the burst.
	feed(3*gens+1, rate)
	if s, _ := big.LaneTables(); s.LaneCapacity < 20*rate {
		t.Fatalf("after a 20x generation the lanes hold %d", s.LaneCapacity)
	}
}

// TestLanesRestore encodes every generation of an interleaved ring, inserts
// the decoded lanes into a new ring, and checks that every hash is there,
// the lanes share tables again as they did, and the new ring keeps
// rotating, dropping the tables it no longer needs.
func TestLanesRestore(t *testing.T) { forLaneKinds(t, testLanesRestore) }

func testLanesRestore(t *testing.T) {
	r := newLaneRing(t, 4, 5000)
	rng := rand.New(rand.NewPCG(5, 6))
	var hs []uint64
	now := t0
	for g := range 5 {
		now = t0.Add(time.Duration(g) * 10 * time.Second)
		r.Advance(now)
		gen, err := r.Active(now)
		if err != nil {
			t.Fatal(err)
		}
		n := 4000
		if g == 2 {
			n = 9000 // overflows
		}
		for range n {
			h := rng.Uint64()
			hs = append(hs, h)
			gen.Filter.Add(h)
		}
	}
	back := newLaneRing(t, 4, 5000)
	// Insert newest first, as a restore may.
	gens := r.Generations()
	for i := len(gens) - 1; i >= 0; i-- {
		enc, err := gens[i].Filter.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		f, err := filter.Unmarshal(enc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := back.Insert(&Generation{ID: gens[i].ID, Filter: f}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hs {
		if !back.Contains(h) {
			t.Fatalf("restored ring lost %#x", h)
		}
	}
	// Generation 2 overflowed, so generation 3 started a larger table:
	// the restored ring has the same two tables.
	if s, _ := back.LaneTables(); s.Tables != 2 {
		t.Fatalf("restored ring holds %d tables, want 2", s.Tables)
	}
	blocked, err := New(Options{Window: 40 * time.Second, Generations: 4, Kind: filter.Blocked, Capacity: 10, FalsePositiveRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := back.Insert(&Generation{ID: 1, Filter: mustFilter(t, blocked)}); err == nil {
		t.Fatal("an interleaved ring took a blocked filter")
	}
	// Rotate past every restored generation: their lanes are reused.
	for g := 5; g < 15; g++ {
		now = t0.Add(time.Duration(g) * 10 * time.Second)
		back.Advance(now)
		gen, err := back.Active(now)
		if err != nil {
			t.Fatal(err)
		}
		gen.Filter.Add(rng.Uint64())
	}
	if s, _ := back.LaneTables(); s.Tables != 1 {
		t.Fatalf("after rotating, the restored ring holds %d tables", s.Tables)
	}
}

func mustFilter(t *testing.T, r *Ring) filter.Filter {
	g, err := r.Get(1)
	if err != nil {
		t.Fatal(err)
	}
	return g.Filter
}

// TestLanesFP measures the rate at which absent hashes match a ring whose
// N+1 generations are all at capacity: within [0.9, 1] x the target (the
// tables get 31/32 of it), +-5 binomial sigma.
func TestLanesFP(t *testing.T) { forLaneKinds(t, testLanesFP) }

func testLanesFP(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 5 generations of 200k keys")
	}
	const fp, per, probes = 0.01, 200_000, 2_000_000
	r := newLaneRing(t, 4, per)
	rng := rand.New(rand.NewPCG(7, 8))
	for g := range 5 {
		now := t0.Add(time.Duration(g) * 10 * time.Second)
		r.Advance(now)
		gen, err := r.Active(now)
		if err != nil {
			t.Fatal(err)
		}
		// The first generation's table grows with it (young ring): give it
		// the configured capacity, the others their lane's.
		for gen.Filter.Count() < max(gen.Filter.Capacity(), per) {
			gen.Filter.Add(rng.Uint64())
		}
	}
	hits := 0
	for range probes {
		if r.Contains(rng.Uint64()) {
			hits++
		}
	}
	got := float64(hits) / probes
	sigma := math.Sqrt(fp / probes)
	s, _ := r.LaneTables()
	t.Logf("measured %.5f at capacity, %.2f bytes per key of the window", got, float64(s.Bytes)/(4*float64(s.LaneCapacity)))
	if got > fp+5*sigma || got < 0.9*fp-5*sigma {
		t.Fatalf("measured %.5f, want [0.9, 1] x %g", got, fp)
	}
}

func TestLanesConfig(t *testing.T) { forLaneKinds(t, testLanesConfig) }

func testLanesConfig(t *testing.T) {
	if _, err := New(Options{Window: time.Hour, Generations: 16, Kind: laneKindOf(t), Capacity: 10, FalsePositiveRate: 0.01}); err == nil {
		t.Fatal("16 generations (17 lanes) accepted")
	}
	if _, err := New(Options{Window: time.Hour, Generations: 15, Kind: laneKindOf(t), Capacity: 10, FalsePositiveRate: 0.01}); err != nil {
		t.Fatal(err)
	}
	a, err := EstimateBytes(Options{Window: time.Hour, Generations: 4, Kind: laneKindOf(t), Capacity: 1 << 20, FalsePositiveRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if a < 2<<20*4 || a > 4<<20*4 { // 2.99 bytes per key of 4 generations
		t.Fatalf("estimate %d bytes for 4 generations of 1M keys", a)
	}
}

// TestLanesYoung: a fresh ring sized for far more than it gets starts its
// table small and rebuilds it 2x larger from the first generation's
// journal as that fills, never losing a hash nor exceeding its target;
// the second generation settles the table (rebuilt for 1.5x the first
// one's keys unless within 1.5x of that already) and drops the journal; a first generation that reaches Options.Capacity
// stops growing the table and overflows as usual.
func TestLanesYoung(t *testing.T) { forLaneKinds(t, testLanesYoung) }

func testLanesYoung(t *testing.T) {
	r := newLaneRing(t, 4, 1<<20)
	rng := rand.New(rand.NewPCG(11, 12))
	now := t0
	r.Advance(now)
	g, err := r.Active(now)
	if err != nil {
		t.Fatal(err)
	}
	var hs []uint64
	for i := range 50_000 {
		h := rng.Uint64()
		hs = append(hs, h)
		g.Filter.Add(h)
		if i == 4000 {
			// 1024 at first, then 2x larger each time the lane fills.
			if s, _ := r.LaneTables(); s.LaneCapacity < 4001 || s.LaneCapacity > 2*4100 {
				t.Fatalf("young ring's table holds %d keys per lane after 4001", s.LaneCapacity)
			}
		}
	}
	s, _ := r.LaneTables()
	if s.Tables != 1 || s.LaneCapacity < 50_000 || s.LaneCapacity > 2*50_000 {
		t.Fatalf("after 50k keys: %+v", s)
	}
	if fp := g.Filter.FPRate(); fp > 0.01/5 {
		t.Fatalf("young lane at %g, over its share of the target", fp)
	}
	for _, h := range hs {
		if !r.Contains(h) {
			t.Fatalf("young ring lost %#x", h)
		}
	}
	now = now.Add(10 * time.Second)
	r.Advance(now)
	g2, err := r.Active(now)
	if err != nil {
		t.Fatal(err)
	}
	g2.Filter.Add(rng.Uint64())
	s, _ = r.LaneTables()
	if s.Tables != 1 || s.LaneCapacity < 50_000 || s.LaneCapacity > 112_500 {
		t.Fatalf("settled: %+v, want lanes of 50k-112.5k (1.5x 75k)", s)
	}
	if g.Filter.(*filter.LaneView).Journaling() {
		t.Fatal("the first generation still journals")
	}
	for _, h := range hs {
		if !r.Contains(h) {
			t.Fatalf("settled ring lost %#x", h)
		}
	}

	// Capped at Options.Capacity: 30k keys into a ring sized for 20k.
	small := newLaneRing(t, 4, 20_000)
	small.Advance(t0)
	g, err = small.Active(t0)
	if err != nil {
		t.Fatal(err)
	}
	hs = hs[:0]
	for range 30_000 {
		h := rng.Uint64()
		hs = append(hs, h)
		g.Filter.Add(h)
	}
	v := g.Filter.(*filter.LaneView)
	if v.Journaling() || !v.Overflowed() || v.Table().Capacity() < 20_000 || v.Table().Capacity() > 21_000 {
		t.Fatalf("capped young lane: journaling %v, overflowed %v, capacity %d", v.Journaling(), v.Overflowed(), v.Table().Capacity())
	}
	for _, h := range hs {
		if !small.Contains(h) {
			t.Fatalf("capped young ring lost %#x", h)
		}
	}
}
