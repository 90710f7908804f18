package dedup_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	. "github.com/streamdedup/dedup"
)

// observeAtT observes key at event time ts and fails unless the verdict
// is want.
func observeAtT(t *testing.T, e *Engine, key string, ts time.Time, want Verdict) {
	t.Helper()
	v, err := e.ObserveAt([]byte(key), ts)
	if err != nil || v != want {
		t.Fatalf("ObserveAt(%s, %v) = %v, %v; want %v", key, ts.Sub(t0), v, err, want)
	}
}

// TestRefreshKeepsDropping: with Refresh, a key that keeps coming back
// within the window is dropped for as long as it does (the fixed window
// lets it through W + W/N after its first sighting), and is New again W +
// W/N after its last sighting, not before W.
func TestRefreshKeepsDropping(t *testing.T) {
	const window = time.Minute
	forEachMode(t, func(t *testing.T, prob bool) {
		for _, refresh := range []bool{false, true} {
			e := openT(t, Options{Window: window, Generations: 4, EventTime: true, Probabilistic: prob, Refresh: refresh})
			observeAtT(t, e, "x", t0, New)
			mustCommit(t, e, "")
			last := t0
			for i := 1; i <= 15; i++ { // every 40 s for 10 minutes
				ts := t0.Add(time.Duration(i) * 40 * time.Second)
				want := Duplicate
				if !refresh && ts.Sub(last) >= window+window/4 {
					want = New
				}
				observeAtT(t, e, "x", ts, want)
				if !refresh && want == Duplicate {
					continue
				}
				last = ts
				if !refresh || i%3 != 0 { // some renewals wait for a later commit
					mustCommit(t, e, "")
				}
			}
			if !refresh {
				continue
			}
			mustCommit(t, e, "")
			end := t0.Add(10 * time.Minute)
			observeAtT(t, e, "x", end.Add(window-time.Second), Duplicate) // a sighting too
			mustCommit(t, e, "")
			end = end.Add(window - time.Second)
			observeAtT(t, e, "x", end.Add(window+window/4), New)
		}
	})
}

// TestRefreshInFlight: with Refresh, a key seen again while in flight is
// remembered from that sighting once committed.
func TestRefreshInFlight(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		for _, refresh := range []bool{false, true} {
			e := openT(t, Options{Window: time.Minute, Generations: 4, EventTime: true, Probabilistic: prob, Refresh: refresh})
			observeAtT(t, e, "x", t0, New)
			observeAtT(t, e, "x", t0.Add(50*time.Second), InFlight)
			mustCommit(t, e, "")
			want := New // past W + W/N of the first sighting
			if refresh {
				want = Duplicate // 50 s after the last
			}
			observeAtT(t, e, "x", t0.Add(100*time.Second), want)
		}
	})
}

// TestRefreshUncommittedRenewal: a renewal not committed yet keeps its key
// a Duplicate once the generation of its previous sighting has expired.
func TestRefreshUncommittedRenewal(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		e := openT(t, Options{Window: time.Minute, Generations: 4, EventTime: true, Probabilistic: prob, Refresh: true})
		observeAtT(t, e, "x", t0, New)
		mustCommit(t, e, "")
		observeAtT(t, e, "x", t0.Add(50*time.Second), Duplicate) // a renewal, not committed
		observeAtT(t, e, "x", t0.Add(80*time.Second), Duplicate) // its first generation expired at 75 s
		mustCommit(t, e, "")
		observeAtT(t, e, "x", t0.Add(110*time.Second), Duplicate)
		observeAtT(t, e, "x", t0.Add(110*time.Second+time.Minute+15*time.Second), New)
	})
}

// TestRefreshSurvivesReopen: a renewal committed is remembered after a
// reopen; one not committed is lost with the engine, and its key is
// remembered from its previous committed sighting.
func TestRefreshSurvivesReopen(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		o := Options{Dir: "/state", FS: vfs.NewMem(), Window: time.Minute, Generations: 4, EventTime: true, Probabilistic: prob, Refresh: true}
		e := openT(t, o)
		observeAtT(t, e, "x", t0, New)
		observeAtT(t, e, "y", t0, New)
		mustCommit(t, e, "1")
		observeAtT(t, e, "x", t0.Add(50*time.Second), Duplicate)
		mustCommit(t, e, "2")
		observeAtT(t, e, "y", t0.Add(55*time.Second), Duplicate) // not committed
		if err := e.Close(); err != nil && !strings.Contains(err.Error(), "in flight") {
			t.Fatal(err)
		}
		e = openT(t, o)
		observeAtT(t, e, "x", t0.Add(100*time.Second), Duplicate) // 50 s after its committed renewal
		observeAtT(t, e, "y", t0.Add(100*time.Second), New)       // 100 s after its committed sighting
	})
}
