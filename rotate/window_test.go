package rotate

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

func windowRing(t *testing.T, window, maxWindow time.Duration, gens int) *Ring {
	t.Helper()
	r, err := New(Options{Window: window, MaxWindow: maxWindow, Generations: gens, Kind: filter.Blocked,
		Capacity: 1 << 12, FalsePositiveRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSetWindowKeepsEveryHashItsWindow drives a ring through random
// window changes and checks, at every step, that every hash is held for
// at least the window in force when it arrived, and dropped by the
// widest window in force since then (or in force up to a window before)
// plus a span.
func TestSetWindowKeepsEveryHashItsWindow(t *testing.T) {
	const minW, maxW = 4 * time.Minute, 40 * time.Minute
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := windowRing(t, minW, maxW, 4)
		span := r.Span()
		type held struct {
			h        uint64
			gen      uint64
			at       time.Time
			window   time.Duration // in force at arrival
			widest   time.Duration // widest in force since
			released bool
		}
		var hs []*held
		now := time.Unix(1_700_000_000, 0)
		// changes is every window set, with its time: a hash may be held
		// for a wider window in force up to one such window before it came.
		type change struct {
			at time.Time
			w  time.Duration
		}
		changes := []change{{now, minW}}
		recentWidest := func(at time.Time) time.Duration {
			w := changes[len(changes)-1].w
			for i := len(changes) - 2; i >= 0; i-- {
				// In force until the next change, and felt a window and a
				// span past it.
				if !changes[i+1].at.Add(changes[i].w + span).Before(at) {
					w = max(w, changes[i].w)
				}
			}
			return w
		}
		for step := range 3000 {
			now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
			r.Advance(now)
			if rng.IntN(40) == 0 {
				w := minW + time.Duration(rng.Int64N(int64(maxW-minW)))
				if _, err := r.SetWindow(w, now); err != nil {
					t.Fatal(err)
				}
				changes = append(changes, change{now, w})
				for _, x := range hs {
					x.widest = max(x.widest, w)
				}
			}
			g, err := r.Active(now)
			if err != nil {
				t.Fatal(err)
			}
			h := rng.Uint64()
			g.Filter.Add(h)
			hs = append(hs, &held{h: h, gen: g.ID, at: now, window: r.Window(), widest: recentWidest(now)})
			oldest := r.OldestLive(now)
			for _, x := range hs {
				age := now.Sub(x.at)
				if age < x.window && (x.gen < oldest || !r.Contains(x.h)) {
					t.Fatalf("seed %d step %d: hash of age %v dropped under the window %v it arrived with", seed, step, age, x.window)
				}
				if age >= x.widest+span && x.gen >= oldest {
					t.Fatalf("seed %d step %d: hash of age %v still live past the widest window %v since it came plus a span %v; at %v gen %d expiry %v changes %v sched %+v", seed, step, age, x.widest, span, x.at.Unix(), x.gen, r.Expiry(x.gen).Unix(), changes, r.Schedule().Changes())
				}
				if !r.Expiry(x.gen).After(x.at.Add(x.window - 1)) {
					t.Fatalf("seed %d step %d: Expiry %v is before arrival %v plus its window %v", seed, step, r.Expiry(x.gen), x.at, x.window)
				}
			}
			// Drop the hashes well past every window from the check.
			i := 0
			for i < len(hs) && now.Sub(hs[i].at) > 2*maxW {
				i++
			}
			hs = hs[i:]
		}
	}
}

// TestSetWindowRange checks the bounds: SetWindow refuses a window
// outside [Window, MaxWindow], a fixed ring refuses every other window,
// and New refuses a MaxWindow below Window or past the generations a
// kind holds.
func TestSetWindowRange(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := windowRing(t, time.Minute, 10*time.Minute, 2)
	for _, w := range []time.Duration{59 * time.Second, 11 * time.Minute, 0, -time.Minute} {
		if _, err := r.SetWindow(w, now); !errors.Is(err, ErrWindowOutOfRange) {
			t.Errorf("SetWindow(%v) = %v, want ErrWindowOutOfRange", w, err)
		}
	}
	if changed, err := r.SetWindow(10*time.Minute, now); err != nil || !changed {
		t.Errorf("SetWindow(10m) = %v, %v", changed, err)
	}
	if changed, err := r.SetWindow(10*time.Minute, now); err != nil || changed {
		t.Errorf("SetWindow(10m) again = %v, %v, want no change", changed, err)
	}
	fixed := windowRing(t, time.Minute, 0, 2)
	if _, err := fixed.SetWindow(2*time.Minute, now); !errors.Is(err, ErrWindowOutOfRange) {
		t.Errorf("fixed ring: SetWindow = %v, want ErrWindowOutOfRange", err)
	}
	for _, o := range []Options{
		{Window: time.Minute, MaxWindow: 30 * time.Second, Generations: 2, Kind: filter.Blocked, Capacity: 1, FalsePositiveRate: 0.01},
		{Window: time.Minute, MaxWindow: time.Hour, Generations: 4, Kind: filter.Interleaved, Capacity: 1, FalsePositiveRate: 0.01},
		{Window: time.Second, MaxWindow: time.Hour, Generations: 4, Kind: filter.Blocked, Capacity: 1, FalsePositiveRate: 0.01},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) = nil error", o)
		}
	}
}

// TestSetWindowSizesForMaxWindow checks that a ring with a MaxWindow sizes
// each generation for the lookup across MaxWindow's generations.
func TestSetWindowSizesForMaxWindow(t *testing.T) {
	fixed := windowRing(t, time.Minute, 0, 4)
	wide := windowRing(t, time.Minute, 10*time.Minute, 4)
	if got, want := wide.PerGenerationFP(), PerGenerationFP(0.01, 40); got != want {
		t.Errorf("PerGenerationFP = %g, want %g (40 generations)", got, want)
	}
	if fixed.PerGenerationFP() != PerGenerationFP(0.01, 4) {
		t.Errorf("fixed PerGenerationFP = %g", fixed.PerGenerationFP())
	}
	if n := wide.Schedule().MaxHeld(); n != 41 {
		t.Errorf("MaxHeld = %d, want 41", n)
	}
}

// TestScheduleShared checks that rings made from one ring's Options
// follow its window changes, and that changes racing with lookups from
// several goroutines are safe (run under -race).
func TestScheduleShared(t *testing.T) {
	a := windowRing(t, time.Minute, 10*time.Minute, 4)
	b, err := New(a.Options())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	if _, err := a.SetWindow(5*time.Minute, now); err != nil {
		t.Fatal(err)
	}
	if b.Window() != 5*time.Minute || !b.Expiry(b.GenerationAt(now)).Equal(a.Expiry(a.GenerationAt(now))) {
		t.Fatalf("b does not follow a's window: %v", b.Window())
	}
	var wg sync.WaitGroup
	rings := []*Ring{a, b}
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rings[i%2]
			for j := range 2000 {
				t := now.Add(time.Duration(j) * time.Second)
				if i < 2 {
					_, _ = r.SetWindow(time.Minute+time.Duration(j%9)*time.Minute, t)
				} else {
					_ = r.OldestLive(t)
					_ = r.Expiry(r.GenerationAt(t))
					_ = r.Window()
				}
			}
		}()
	}
	wg.Wait()
}

// TestScheduleRestore checks that Changes and Restore carry a schedule to
// a new ring: every generation expires when it did.
func TestScheduleRestore(t *testing.T) {
	a := windowRing(t, time.Minute, 10*time.Minute, 4)
	now := time.Unix(1_700_000_000, 0)
	for i, w := range []time.Duration{8, 2, 5, 1, 9, 3} {
		now = now.Add(time.Duration(i+1) * 20 * time.Second)
		if _, err := a.Active(now); err != nil {
			t.Fatal(err)
		}
		if _, err := a.SetWindow(w*time.Minute, now); err != nil {
			t.Fatal(err)
		}
	}
	b := windowRing(t, time.Minute, 10*time.Minute, 4)
	if err := b.Schedule().Restore(a.Schedule().Changes()); err != nil {
		t.Fatal(err)
	}
	g := a.GenerationAt(now)
	for id := g - 60; id < g+60; id++ {
		if !a.Expiry(id).Equal(b.Expiry(id)) {
			t.Errorf("generation %d: expiry %v, restored %v", id, a.Expiry(id), b.Expiry(id))
		}
	}
	for d := -time.Hour; d < time.Hour; d += 7 * time.Second {
		if x, y := a.OldestLive(now.Add(d)), b.OldestLive(now.Add(d)); x != y {
			t.Errorf("OldestLive(now%+v) = %d, restored %d", d, x, y)
		}
	}
	if b.Window() != 3*time.Minute {
		t.Errorf("restored Window = %v", b.Window())
	}
	if err := b.Schedule().Restore(nil); err == nil {
		t.Error("Restore(nil) = nil error")
	}
}
