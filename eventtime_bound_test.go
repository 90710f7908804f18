package dedup_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	. "github.com/streamdedup/dedup"
)

// isSync reports whether op is a file sync.
func isSync(op errorfs.Op) bool {
	return op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
}

// TestEventTimeBound: on event time, every key is remembered at least
// Window and at most Window + Window/Generations of event time, whatever
// the rate, the batching or how far the commits lag behind the events: at
// 10, 100 and 10,000 events a second of event time, in batches of 1 to
// 2,000 events (up to 200 s of event time at 10/s), some events late,
// 30% of them redeliveries up to 2.5 windows after an earlier event, the
// commits in the background with every fsync held until the events are a
// fifth of the stream (more than a window) further. The oracle is a
// map of key to the event clock of its last New: no key is New before
// Window, none fails to be New at Window + Window/Generations.
func TestEventTimeBound(t *testing.T) {
	var late uint64
	for _, rate := range []float64{10, 100, 10000} {
		t.Run(fmt.Sprintf("rate=%v", rate), func(t *testing.T) { late += eventTimeBound(t, rate) })
	}
	// How far the commits lag depends on the machine (-race slows the
	// observes more than the held fsyncs): over the three rates some keys
	// must have been renewed while in flight.
	if late == 0 {
		t.Fatal("no key was renewed while in flight: the commits never lagged past a window")
	}
}

// eventTimeBound runs the stream at rate and returns how many keys were
// renewed while in flight (WindowAdvice.Late).
func eventTimeBound(t *testing.T, rate float64) uint64 {
	const events = 30000
	const gens = 4
	dur := time.Duration(float64(events) / rate * float64(time.Second))
	window := (dur / 6).Truncate(gens * time.Millisecond)
	// Every fsync waits until the observer is need events along: a
	// commit lags a fifth of the stream (more than a window) behind the
	// events it follows, whatever the machine's speed.
	var observed, need atomic.Int64
	slow := errorfs.InjectorFunc(func(op errorfs.Op) error {
		for isSync(op) && observed.Load() < need.Load() {
			time.Sleep(50 * time.Microsecond)
		}
		return nil
	})
	e := openT(t, Options{Dir: "/state", FS: errorfs.Wrap(vfs.NewMem(), slow), Window: window, Generations: gens, EventTime: true})
	rng := rand.New(rand.NewPCG(uint64(rate), 40))
	type ev struct {
		at  time.Time
		key string
	}
	evs := make([]ev, events)
	for i := range evs {
		at := t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if rng.IntN(9) == 0 { // late by up to half a span
			at = at.Add(-time.Duration(rng.Int64N(int64(window / gens / 2))))
		}
		key := fmt.Sprintf("k%d", i)
		if i > 0 && rng.IntN(10) < 3 {
			back := int(rng.Float64() * 2.5 * window.Seconds() * rate)
			key = evs[max(0, i-1-back)].key
		}
		evs[i] = ev{at, key}
	}
	last := map[string]time.Time{} // the oracle: the clock at the key's last New
	var clock time.Time
	done := make(chan error, 1)
	running := false
	var keys [][]byte
	var times []time.Time
	var out []Verdict
	var renewed, kept int
	for lo := 0; lo < len(evs); {
		hi := min(lo+1+rng.IntN(2000), len(evs))
		keys, times = keys[:0], times[:0]
		for _, x := range evs[lo:hi] {
			keys = append(keys, []byte(x.key))
			times = append(times, x.at)
		}
		out = append(out[:0], make([]Verdict, hi-lo)...)
		if err := e.ObserveBatchTimes(keys, times, out); err != nil {
			t.Fatal(err)
		}
		observed.Store(int64(hi))
		for i, x := range evs[lo:hi] {
			if x.at.After(clock) {
				clock = x.at
			}
			v := out[i]
			f, seen := last[x.key]
			age := clock.Sub(f)
			switch {
			case v == 0:
				t.Fatalf("event %d: no verdict", lo+i)
			case !seen && v != New:
				t.Fatalf("event %d %s: %v at its first sighting, want new", lo+i, x.key, v)
			case seen && age < window && v == New:
				t.Fatalf("event %d %s: new %v after its last New, under the window %v", lo+i, x.key, age, window)
			case seen && age >= window+window/gens && v != New:
				t.Fatalf("event %d %s: %v %v after its last New, past Window + Window/Generations %v", lo+i, x.key, v, age, window+window/gens)
			case seen && age >= window && v == New:
				renewed++
			case seen && age >= window:
				kept++
			}
			if v == New {
				last[x.key] = clock
			}
		}
		b := e.Barrier()
		if running {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				running = false
			default:
			}
		}
		if !running {
			running = true
			need.Store(int64(hi + events/5))
			go func() { done <- e.CommitThrough(b, nil) }()
		}
		lo = hi
	}
	need.Store(0)
	if running {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	late := e.Stats().WindowAdvice.Late
	t.Logf("window %v: %d let through past the window, %d kept in its last span, %d renewed while in flight", window, renewed, kept, late)
	if renewed < 100 {
		t.Fatalf("%d let through past the window: the stream does not exercise the bound", renewed)
	}
	return late
}

// TestEventTimeRenewedAfterBarrier: a key in flight from before a barrier,
// seen again past its window after the barrier, is New again, and a
// commit through that barrier does not make the new sighting durable: it
// stays in flight, and is forgotten by a close without a commit, as every
// key observed after the barrier is.
func TestEventTimeRenewedAfterBarrier(t *testing.T) {
	const window = time.Minute
	fs := vfs.NewMem()
	o := Options{Dir: "/state", FS: fs, Window: window, Generations: 4, EventTime: true}
	e := openT(t, o)
	at := func(e *Engine, key string, ts time.Time, want Verdict) {
		t.Helper()
		v, err := e.ObserveAt([]byte(key), ts)
		if err != nil || v != want {
			t.Fatalf("ObserveAt(%s, %v) = %v, %v; want %v", key, ts.Sub(t0), v, err, want)
		}
	}
	at(e, "x", t0, New)
	b := e.Barrier()
	at(e, "x", t0.Add(3*window), New) // renewed: past the window
	if err := e.CommitThrough(b, []byte("b")); err != nil {
		t.Fatal(err)
	}
	at(e, "x", t0.Add(3*window+time.Second), InFlight)
	if err := e.Close(); err != nil && !strings.Contains(err.Error(), "in flight") {
		t.Fatal(err)
	}
	e = openT(t, o)
	at(e, "x", t0.Add(3*window+2*time.Second), New)
}

// TestEventTimeRenewedWhileCommitting: a key being committed (its commit
// held in its fsync), seen again past its window, is New again, not
// InFlight until the commit ends; once that sighting is committed it is a
// Duplicate, across a reopen too.
func TestEventTimeRenewedWhileCommitting(t *testing.T) {
	const window = time.Minute
	var mu sync.Mutex
	hold := false
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		mu.Lock()
		h := hold && isSync(op) // the commit's write, its sets taken
		if h {
			hold = false
		}
		mu.Unlock()
		if h {
			held <- struct{}{}
			<-release
		}
		return nil
	})
	mem := vfs.NewMem()
	o := Options{Dir: "/state", FS: errorfs.Wrap(mem, inj), Window: window, Generations: 4, EventTime: true}
	e := openT(t, o)
	at := func(e *Engine, key string, ts time.Time, want Verdict) {
		t.Helper()
		v, err := e.ObserveAt([]byte(key), ts)
		if err != nil || v != want {
			t.Fatalf("ObserveAt(%s, %v) = %v, %v; want %v", key, ts.Sub(t0), v, err, want)
		}
	}
	at(e, "x", t0, New)
	at(e, "y", t0.Add(10*time.Second), New)
	mu.Lock()
	hold = true
	mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- e.Commit([]byte("1")) }()
	<-held
	at(e, "x", t0.Add(2*window), New)                  // being committed, past the window
	at(e, "x", t0.Add(2*window+time.Second), InFlight) // the new sighting, in flight
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	at(e, "x", t0.Add(2*window+2*time.Second), InFlight)
	mustCommit(t, e, "2")
	at(e, "x", t0.Add(2*window+3*time.Second), Duplicate)
	e = reopen(t, e, o)
	at(e, "x", t0.Add(2*window+4*time.Second), Duplicate)
}
