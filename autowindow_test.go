package dedup_test

import (
	dupheap "container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

// delayHeap orders pending duplicates by their arrival.
type pendingDup struct {
	at     time.Duration
	key    string
	origAt time.Duration
	window time.Duration // in force when the original arrived
}
type delayHeap []pendingDup

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(pendingDup)) }
func (h *delayHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// autoStream is a simulated stream: originals at rate per second, each
// followed by one duplicate with probability dupP after a delay drawn by
// delay.
type autoStream struct {
	rate  float64
	dupP  float64
	delay func(*rand.Rand) time.Duration
	dur   time.Duration
	// measureFrom starts the count of leaks (the duplicates let through).
	measureFrom time.Duration
}

// autoResult is the truth counted from the verdicts.
type autoResult struct {
	events, dups, leaks int // leaks and events from measureFrom on
	// short counts the duplicates observed New whose delay was under the
	// window in force when their original arrived: must be 0.
	short     int
	maxFilter uint64
	windows   []time.Duration // the window after each change
	final     Stats
}

// runAutoStream drives e, on clock, through s in one-second batches,
// committing each, and counts the truth.
func runAutoStream(t *testing.T, e *Engine, clock *testclock.Clock, s autoStream, seed uint64) autoResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var r autoResult
	var pending delayHeap
	start := clock.Now()
	var keys [][]byte
	var meta []pendingDup
	out := []Verdict{}
	next := 0
	lastWindow := e.Window()
	for sec := time.Duration(0); sec < s.dur; sec += time.Second {
		keys, meta = keys[:0], meta[:0]
		w := e.Window()
		if w != lastWindow {
			r.windows = append(r.windows, w)
			lastWindow = w
		}
		n := int(s.rate)
		if f := s.rate - float64(n); rng.Float64() < f {
			n++
		}
		for range n {
			k := fmt.Sprintf("o-%d", next)
			next++
			keys = append(keys, []byte(k))
			meta = append(meta, pendingDup{})
			if rng.Float64() < s.dupP {
				d := s.delay(rng)
				dupheap.Push(&pending, pendingDup{at: sec + d.Truncate(time.Second), key: k, origAt: sec, window: w})
			}
		}
		for len(pending) > 0 && pending[0].at <= sec {
			d := dupheap.Pop(&pending).(pendingDup)
			keys = append(keys, []byte(d.key))
			meta = append(meta, d)
		}
		clock.Set(start.Add(sec))
		if cap(out) < len(keys) {
			out = make([]Verdict, len(keys))
		}
		out = out[:len(keys)]
		if err := e.ObserveBatch(keys, out); err != nil {
			t.Fatal(err)
		}
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		for i, m := range meta {
			if sec >= s.measureFrom {
				r.events++
			}
			if m.key == "" {
				continue
			}
			if sec >= s.measureFrom {
				r.dups++
			}
			if out[i] != New {
				continue
			}
			if sec-m.origAt < m.window {
				r.short++
			}
			if sec >= s.measureFrom {
				r.leaks++
			}
		}
		if sec%(30*time.Second) == 0 {
			r.maxFilter = max(r.maxFilter, e.Stats().FilterBytes)
		}
	}
	r.final = e.Stats()
	r.maxFilter = max(r.maxFilter, r.final.FilterBytes)
	return r
}

func expDelay(mean time.Duration) func(*rand.Rand) time.Duration {
	return func(rng *rand.Rand) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
}

func lognormalDelay(median time.Duration, sigma float64) func(*rand.Rand) time.Duration {
	return func(rng *rand.Rand) time.Duration {
		return time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
	}
}

// mixtureDelay is the two-humped mixture: share of the delays after an
// exponential of mean a, the rest after one of mean b.
func mixtureDelay(share float64, a, b time.Duration) func(*rand.Rand) time.Duration {
	return func(rng *rand.Rand) time.Duration {
		m := b
		if rng.Float64() < share {
			m = a
		}
		return time.Duration(rng.ExpFloat64() * float64(m))
	}
}

// TestAutoWindowMeetsTarget runs the advisor's simulated streams under
// AutoWindow with a target of 100 leaks per million: once the window has
// followed the measured delays, the duplicates let through are within 30%
// of the target, and no duplicate is let through before the window in
// force when its original arrived.
func TestAutoWindowMeetsTarget(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a million events or more per stream: 15-30 s each (.ci/run runs it without -race)")
	}
	cases := []struct {
		name   string
		stream autoStream
		gens   int
		min    time.Duration
		max    time.Duration
	}{
		// 2% duplicates after an exponential delay of mean 2 min:
		// 100/M needs P(delay > W) = 0.5%, W about 10.6 min.
		{"exponential", autoStream{rate: 400, dupP: 0.02, delay: expDelay(2 * time.Minute), dur: 80 * time.Minute, measureFrom: 20 * time.Minute}, 4, 2 * time.Minute, 30 * time.Minute},
		// median 1 min, sigma 1: W about 13 min.
		{"lognormal", autoStream{rate: 400, dupP: 0.02, delay: lognormalDelay(time.Minute, 1), dur: 80 * time.Minute, measureFrom: 20 * time.Minute}, 4, 2 * time.Minute, 30 * time.Minute},
		// 80% after a mean of 10 s, 20% after 10 min: W about 37 min.
		{"mixture", autoStream{rate: 400, dupP: 0.02, delay: mixtureDelay(0.8, 10*time.Second, 10*time.Minute), dur: 200 * time.Minute, measureFrom: 80 * time.Minute}, 2, 5 * time.Minute, time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := testclock.New(t0)
			var logs logLines
			e := openT(t, Options{Now: clock.Now, Generations: c.gens, ExpectedRate: 1000, Logf: logs.logf,
				AutoWindow: &AutoWindow{MaxLeaks: 100, Min: c.min, Max: c.max}})
			r := runAutoStream(t, e, clock, c.stream, 1)
			perM := 1e6 * float64(r.leaks) / float64(r.events)
			aw := r.final.AutoWindow
			t.Logf("%s: %d leaks in %d events from %v: %.0f per million; window %v (target %v, %s), %d changes, windows %v; advice %+v",
				c.name, r.leaks, r.events, c.stream.measureFrom, perM, aw.Window, aw.Target, aw.Reason, aw.Changes, r.windows, r.final.WindowAdvice)
			if r.short != 0 {
				t.Errorf("%d duplicates let through before the window in force when their original came", r.short)
			}
			if math.Abs(perM-100) > 30 {
				t.Errorf("%.0f leaks per million, want 100 within 30%%", perM)
			}
			if aw.Changes == 0 || len(logs.containing("dedup: window ")) == 0 {
				t.Errorf("no window change logged: %d changes, log %q", aw.Changes, logs.all())
			}
		})
	}
}

// TestAutoWindowBudgetWins checks that a MaxMemory under what the target
// needs holds the filters under it, and that the stats say what the
// target would cost.
func TestAutoWindowBudgetWins(t *testing.T) {
	const budget = 512 << 10
	clock := testclock.New(t0)
	var logs logLines
	e := openT(t, Options{Now: clock.Now, ExpectedRate: 1000, Logf: logs.logf,
		AutoWindow: &AutoWindow{MaxLeaks: 100, Min: 2 * time.Minute, Max: 30 * time.Minute, MaxMemory: budget}})
	r := runAutoStream(t, e, clock, autoStream{rate: 400, dupP: 0.02, delay: expDelay(2 * time.Minute), dur: 40 * time.Minute}, 2)
	aw := r.final.AutoWindow
	t.Logf("window %v, target %v costing %d bytes, %s; max filter bytes %d; windows %v", aw.Window, aw.Target, aw.TargetBytes, aw.Reason, r.maxFilter, r.windows)
	if r.maxFilter > budget {
		t.Errorf("filters took %d bytes, over MaxMemory %d", r.maxFilter, budget)
	}
	if !strings.HasPrefix(aw.Reason, "budget") || aw.TargetBytes <= budget || aw.Window >= aw.Target {
		t.Errorf("AutoWindow = %+v, want the budget to win: a window under the target, whose cost is over %d", aw, budget)
	}
	if r.short != 0 {
		t.Errorf("%d duplicates let through before the window in force when their original came", r.short)
	}
}

// TestAutoWindowKeptAcrossRestart checks that the window in force is kept
// with the state: a reopen goes on with it, and a key held under a wide
// window is still held after a reopen, also with a fixed window again.
func TestAutoWindowKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New(t0)
	auto := &AutoWindow{MaxLeaks: 100, Min: 2 * time.Minute, Max: 30 * time.Minute}
	o := Options{Dir: dir, Now: clock.Now, ExpectedRate: 1000, AutoWindow: auto}
	e := openT(t, o)
	if changed, err := e.SetWindowAt(20*time.Minute, clock.Now()); err != nil || !changed {
		t.Fatalf("SetWindowAt = %v, %v", changed, err)
	}
	mustObserve(t, e, "wide", New)
	mustCommit(t, e, "a")
	// Narrowing keeps what is held.
	clock.Advance(time.Minute)
	if _, err := e.SetWindowAt(4*time.Minute, clock.Now()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	mustObserve(t, e, "narrow", New)
	mustCommit(t, e, "b")
	e = reopen(t, e, o)
	if w := e.Window(); w != 4*time.Minute {
		t.Errorf("reopened Window = %v, want 4m", w)
	}
	clock.Advance(10 * time.Minute) // past 4m and Min's 2m, within 20m
	mustObserve(t, e, "wide", Duplicate)
	// "narrow" came after the narrowing, but no generation expires before
	// one made earlier: it is held as long as "wide".
	mustObserve(t, e, "narrow", Duplicate)
	mustCommit(t, e, "c")
	// Without AutoWindow: the window is Window again, for new keys only.
	fixed := o
	fixed.AutoWindow, fixed.Window = nil, 2*time.Minute
	e = reopen(t, e, fixed)
	if w := e.Window(); w != 2*time.Minute {
		t.Errorf("fixed Window = %v, want 2m", w)
	}
	clock.Advance(5 * time.Minute) // 17 min after "wide" came
	mustObserve(t, e, "wide", Duplicate)
	clock.Advance(5 * time.Minute) // 22 min: past 20m and a span
	mustObserve(t, e, "wide", New)
}

// TestAutoWindowOptions checks the validation of AutoWindow: each bad
// value is an error naming its field, and the defaults.
func TestAutoWindowOptions(t *testing.T) {
	for _, c := range []struct {
		o     Options
		field string
	}{
		{Options{AutoWindow: &AutoWindow{MaxLeaks: -1}}, "AutoWindow.MaxLeaks"},
		{Options{AutoWindow: &AutoWindow{MaxLeaks: 2e6}}, "AutoWindow.MaxLeaks"},
		{Options{AutoWindow: &AutoWindow{Min: -time.Minute}}, "AutoWindow.Min"},
		{Options{Window: time.Minute, AutoWindow: &AutoWindow{Min: 2 * time.Minute}}, "AutoWindow.Min"},
		{Options{AutoWindow: &AutoWindow{Min: time.Hour, Max: time.Minute}}, "AutoWindow.Max"},
		{Options{AutoWindow: &AutoWindow{Min: time.Minute, Max: 1000 * time.Hour}}, "AutoWindow.Max"},
		{Options{Filter: "interleaved", AutoWindow: &AutoWindow{Min: time.Minute, Max: 10 * time.Minute}}, "AutoWindow.Max"},
		{Options{AutoWindow: &AutoWindow{MaxMemory: -1}}, "AutoWindow.MaxMemory"},
	} {
		err := c.o.Validate()
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", *c.o.AutoWindow, err, c.field)
		}
	}
	a := &AutoWindow{}
	o := Options{Window: 10 * time.Minute, AutoWindow: a}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if *a != (AutoWindow{}) {
		t.Errorf("Validate changed the caller's AutoWindow: %+v", *a)
	}
	o.WithDefaults()
	if got := *o.AutoWindow; got != (AutoWindow{MaxLeaks: 100, Min: 10 * time.Minute, Max: 80 * time.Minute}) {
		t.Errorf("defaults = %+v", got)
	}
}

// TestAutoWindowChangesRaceFree changes the window while goroutines
// observe and commit across every shard (run under -race): every key
// observed again within the window in force when it came is still held.
func TestAutoWindowChangesRaceFree(t *testing.T) {
	clock := testclock.New(t0)
	e := openT(t, Options{Now: clock.Now, Shards: 16, ExpectedRate: 1000,
		AutoWindow: &AutoWindow{Min: time.Minute, Max: 10 * time.Minute}})
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			time.Sleep(time.Millisecond)
			clock.Advance(time.Second)
			if _, err := e.SetWindowAt(time.Minute+time.Duration(i%10)*time.Minute, clock.Now()); err != nil {
				done <- err
				return
			}
		}
	}()
	type held struct {
		key    string
		at     time.Time
		window time.Duration
	}
	err := onGoroutines(4, func(g int) error {
		var hs []held
		for i := range 300 {
			k := fmt.Sprintf("g%d-%d", g, i)
			now, w := clock.Now(), e.Window()
			if v, err := e.Observe([]byte(k)); err != nil || v != New {
				return fmt.Errorf("Observe(%s) = %v, %v", k, v, err)
			}
			if err := e.Commit(nil); err != nil {
				return err
			}
			hs = append(hs, held{k, now, w})
			old := hs[len(hs)/2]
			if clock.Now().Sub(old.at) < old.window {
				if v, err := e.Observe([]byte(old.key)); err != nil || v == New {
					return fmt.Errorf("Observe(%s) %v after it came under a window of %v = %v, %v", old.key, clock.Now().Sub(old.at), old.window, v, err)
				}
			}
		}
		return nil
	})
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestAutoWindowKeptOnEventTime reopens, on event time, a state an
// AutoWindow widened with a fixed window: the keys held keep the wide
// window (the change back starts past the generations restored, not at
// the event clock's zero before any event).
func TestAutoWindowKeptOnEventTime(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, EventTime: true, ExpectedRate: 1000,
		AutoWindow: &AutoWindow{Min: 2 * time.Minute, Max: 30 * time.Minute}}
	e := openT(t, o)
	observeAt := func(e *Engine, key string, at time.Time, want Verdict) {
		t.Helper()
		out := make([]Verdict, 1)
		if err := e.ObserveBatchAt([][]byte{[]byte(key)}, at, out); err != nil || out[0] != want {
			t.Fatalf("observe %s at %v = %v, %v, want %v", key, at.Sub(t0), out[0], err, want)
		}
	}
	if _, err := e.SetWindowAt(20*time.Minute, t0); err != nil {
		t.Fatal(err)
	}
	observeAt(e, "wide", t0, New)
	for i := range 8 {
		observeAt(e, fmt.Sprint("later-", i), t0.Add(time.Duration(i)*time.Minute), New)
		mustCommit(t, e, "")
	}
	fixed := o
	fixed.AutoWindow = nil
	e = reopen(t, e, fixed)
	if w := e.Window(); w != 2*time.Minute {
		t.Errorf("Window = %v, want 2m", w)
	}
	observeAt(e, "wide", t0.Add(15*time.Minute), Duplicate)
	observeAt(e, "later-7", t0.Add(25*time.Minute), Duplicate)
}
