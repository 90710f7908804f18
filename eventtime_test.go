package dedup_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// TestEventTimeReplay replays a log three hours long in a moment of wall
// time, on event time with a 5-minute window: duplicates minutes apart
// are caught, those hours apart are let through, as a map of key to
// first-seen event time says. Late events (up to a minute behind the
// latest) expire nothing early.
func TestEventTimeReplay(t *testing.T) {
	const window = 5 * time.Minute
	const gens = 4
	e := openT(t, Options{Window: window, Generations: gens, EventTime: true})
	base := time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC) // an old log
	type ev struct {
		at  time.Time
		key string
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var evs []ev
	for i := range 3000 {
		at := base.Add(time.Duration(i) * 3 * time.Second)
		k := fmt.Sprintf("k%d", i)
		evs = append(evs, ev{at, k})
		switch i % 3 {
		case 0: // a duplicate 10 s to 4 min later: inside the window
			evs = append(evs, ev{at.Add(10*time.Second + time.Duration(rng.Int64N(int64(230*time.Second)))), k})
		case 1: // a duplicate 1 to 2 hours later: past it
			evs = append(evs, ev{at.Add(time.Hour + time.Duration(rng.Int64N(int64(time.Hour)))), k})
		}
	}
	// In time order, but every 7th event is late by up to a minute.
	sortEvents := func(s []ev) {
		for i := 1; i < len(s); i++ {
			for j := i; j > 0 && s[j].at.Before(s[j-1].at); j-- {
				s[j], s[j-1] = s[j-1], s[j]
			}
		}
	}
	sortEvents(evs)
	first := map[string]time.Time{} // the oracle: first-seen event time
	pending := map[string]bool{}    // first seen since the last commit
	var clock time.Time
	var caught, passed int
	for i, x := range evs {
		at := x.at
		if i%7 == 0 {
			at = at.Add(-time.Duration(rng.Int64N(int64(time.Minute))))
		}
		v, err := e.ObserveAt([]byte(x.key), at)
		if err != nil {
			t.Fatal(err)
		}
		if at.After(clock) {
			clock = at
		}
		f, seen := first[x.key]
		switch {
		case pending[x.key] && clock.Sub(f) >= window+window/gens:
			if v != New {
				t.Fatalf("event %d %s: %v after %v in flight, want new (past the window)", i, x.key, v, clock.Sub(f))
			}
			first[x.key] = clock
			passed++
		case pending[x.key]:
			if v != InFlight {
				t.Fatalf("event %d %s: %v, want in-flight (not committed yet)", i, x.key, v)
			}
		case !seen:
			if v != New {
				t.Fatalf("event %d %s at %v: %v, want new (first sighting)", i, x.key, at, v)
			}
			first[x.key] = clock
			pending[x.key] = true
		case clock.Sub(f) < window:
			if v != Duplicate {
				t.Fatalf("event %d %s: %v after %v, want duplicate", i, x.key, v, clock.Sub(f))
			}
			caught++
		case clock.Sub(f) >= window+window/gens:
			if v != New {
				t.Fatalf("event %d %s: %v after %v, want new (past the window)", i, x.key, v, clock.Sub(f))
			}
			first[x.key] = clock
			pending[x.key] = true
			passed++
		}
		if i%50 == 49 {
			mustCommit(t, e, "")
			clear(pending)
		}
	}
	if caught < 700 || passed < 900 {
		t.Fatalf("caught %d, let through %d: the stream does not exercise both sides", caught, passed)
	}
}

// TestEventTimeLateExpiresNothing: a late event is observed at the latest
// time seen, not its own, and joins the newest generation.
func TestEventTimeLateExpiresNothing(t *testing.T) {
	e := openT(t, Options{Window: time.Minute, Generations: 4, EventTime: true})
	at := func(key string, ts time.Time, want Verdict) {
		t.Helper()
		v, err := e.ObserveAt([]byte(key), ts)
		if err != nil || v != want {
			t.Fatalf("ObserveAt(%s, %v) = %v, %v; want %v", key, ts, v, err, want)
		}
	}
	at("a", t0, New)
	mustCommit(t, e, "")
	at("b", t0.Add(50*time.Second), New)
	at("late", t0.Add(-time.Hour), New) // an hour late: the clock stays
	mustCommit(t, e, "")
	at("a", t0.Add(55*time.Second), Duplicate)
	at("late", t0.Add(80*time.Second), Duplicate) // remembered from the clock at 50 s
	at("a", t0.Add(76*time.Second), New)          // past W + W/N of a's sighting
}

// TestEventTimeInFlightPastWindow: a key seen again while still in flight,
// minutes of event time after its first sighting, past the window (a replay commits after
// many lines), is New again, and its commit remembers the second sighting.
func TestEventTimeInFlightPastWindow(t *testing.T) {
	for _, prob := range []bool{false, true} {
		e := openT(t, Options{Window: time.Minute, Generations: 4, EventTime: true, Probabilistic: prob})
		at := func(key string, ts time.Time, want Verdict) {
			t.Helper()
			v, err := e.ObserveAt([]byte(key), ts)
			if err != nil || v != want {
				t.Fatalf("probabilistic %v: ObserveAt(%s, %v) = %v, %v; want %v", prob, key, ts, v, err, want)
			}
		}
		at("x", t0, New)
		at("x", t0.Add(30*time.Second), InFlight) // within the window, not committed
		at("x", t0.Add(3*time.Minute), New)       // in flight, but past the window
		mustCommit(t, e, "")
		at("x", t0.Add(3*time.Minute+10*time.Second), Duplicate)
		if late := e.Stats().WindowAdvice.Late; late != 1 {
			t.Fatalf("WindowAdvice.Late = %d, want 1", late)
		}
	}
}

func TestEventTimeErrors(t *testing.T) {
	e := openT(t, Options{Window: time.Minute})
	if _, err := e.ObserveAt([]byte("k"), t0); !errors.Is(err, ErrNoEventTime) {
		t.Fatalf("ObserveAt without EventTime: %v, want ErrNoEventTime", err)
	}
	ev := openT(t, Options{Window: time.Minute, EventTime: true})
	if _, err := ev.ObserveAt([]byte("k"), time.Time{}); !errors.Is(err, ErrEventTime) {
		t.Fatalf("ObserveAt(zero time): %v, want ErrEventTime", err)
	}
	if err := ev.ObserveBatchAt([][]byte{[]byte("k")}, t0, nil); !errors.Is(err, ErrBatchLength) {
		t.Fatalf("ObserveBatchAt short out: %v, want ErrBatchLength", err)
	}
	if _, err := Open(Options{EventTime: true, Now: time.Now}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Open with EventTime and Now: %v, want ErrInvalidOptions", err)
	}
}
