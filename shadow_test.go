package dedup_test

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

// fpKey is key i of namespace ns: 16 bytes.
func fpKey(ns, i uint64) []byte {
	k := make([]byte, 16)
	binary.LittleEndian.PutUint64(k, ns)
	binary.LittleEndian.PutUint64(k[8:], i)
	return k
}

// sampledKeys returns n keys of namespace ns, from index *next on, that
// fall in e's sample (about one in 1024).
func sampledKeys(e *Engine, ns uint64, next *uint64, n int) [][]byte {
	var out [][]byte
	for len(out) < n {
		k := fpKey(ns, *next)
		*next++
		if Sampled(e, k) {
			out = append(out, k)
		}
	}
	return out
}

// observeAll observes keys in batches and returns how many got each
// verdict, and the keys that got New.
func observeAll(t testing.TB, e *Engine, keys [][]byte) (map[Verdict]int, [][]byte) {
	t.Helper()
	got := map[Verdict]int{}
	var news [][]byte
	out := make([]Verdict, 1024)
	for lo := 0; lo < len(keys); lo += 1024 {
		b := keys[lo:min(lo+1024, len(keys))]
		if err := e.ObserveBatch(b, out); err != nil {
			t.Fatal(err)
		}
		for i, v := range out[:len(b)] {
			got[v]++
			if v == New {
				news = append(news, b[i])
			}
		}
	}
	return got, news
}

// fillWindow observes and commits per keys of namespace 1 into each of
// gens generations, advancing clk by span after each but the last, and
// returns the sampled keys among those committed (New: the others were
// the filters' false positives).
func fillWindow(t testing.TB, e *Engine, clk *testclock.Clock, gens, per int, span time.Duration) [][]byte {
	t.Helper()
	var held [][]byte
	keys := make([][]byte, 0, per)
	for g := range gens {
		keys = keys[:0]
		for i := range per {
			keys = append(keys, fpKey(1, uint64(g*per+i)))
		}
		got, news := observeAll(t, e, keys)
		if got[New]+got[Duplicate] != per {
			t.Fatalf("generation %d: %v", g, got)
		}
		for _, k := range news {
			if Sampled(e, k) {
				held = append(held, k)
			}
		}
		mustCommit(t, e, "")
		if g < gens-1 {
			clk.Advance(span)
		}
	}
	return held
}

// TestObservedFPEveryKind fills a window of every filter kind to capacity
// at a 5% target and observes sampled keys: new ones (each counted once,
// and a false positive exactly when the engine answers Duplicate), keys the
// window holds and keys in flight (not counted). The observed rate is the
// engine's own false-drop rate on those keys, and agrees with its estimate
// (within 5 binomial sigmas at 3000 samples).
func TestObservedFPEveryKind(t *testing.T) {
	const (
		gens, per = 2, 30_000
		probes    = 3000
	)
	span := time.Hour
	for _, kind := range []string{"blocked", "bloom", "cuckoo", "interleaved", "wide"} {
		t.Run(kind, func(t *testing.T) {
			clk := testclock.New(t0)
			e := openT(t, Options{Filter: kind, Probabilistic: true, Window: gens * span, Generations: gens,
				ExpectedRate: per / span.Seconds(), FalsePositiveRate: 0.05, Now: clk.Now})
			held := fillWindow(t, e, clk, gens+1, per, span)
			st0 := e.Stats()
			var next uint64
			fresh := sampledKeys(e, 2, &next, probes)
			got, _ := observeAll(t, e, fresh)
			if got[New]+got[Duplicate] != probes {
				t.Fatalf("new sampled keys: %v", got)
			}
			// Held keys are duplicates, fresh ones now in flight: neither
			// is a new key, neither counts.
			if g, _ := observeAll(t, e, held); g[Duplicate] != len(held) {
				t.Fatalf("held keys: %v", g)
			}
			observeAll(t, e, fresh)
			st := e.Stats()
			n := st.ObservedFPSamples - st0.ObservedFPSamples
			fp := math.Round(st.ObservedFPRate*float64(st.ObservedFPSamples)) - math.Round(st0.ObservedFPRate*float64(st0.ObservedFPSamples))
			want := float64(got[Duplicate]) / probes
			t.Logf("%s: %d held sampled keys; %d of %d sampled new keys dropped (%.4f), observed %.0f of %d, estimate %.4f",
				kind, len(held), got[Duplicate], probes, want, fp, n, st.EstimatedFPRate)
			// The fresh keys dropped were not in flight the second time:
			// observed, and dropped, twice.
			d := got[Duplicate]
			if n != uint64(probes+d) || fp != float64(2*d) {
				t.Fatalf("observed %.0f false positives of %d samples, want %d of %d", fp, n, 2*d, probes+d)
			}
			// The sampled keys' rate is the filters' rate: within 5 sigma
			// of the estimate (binomial), and not zero.
			est := st.EstimatedFPRate
			if got[Duplicate] == 0 || math.Abs(want-est) > 5*math.Sqrt(est*(1-est)/probes) {
				t.Fatalf("observed %.4f, estimate %.4f", want, est)
			}
		})
	}
}

// TestObservedFPRestart: the shadow is not in snapshots. After Open from
// a snapshot nothing is counted while a restored generation is live, then
// counting resumes; after Open from the commit log the shadow is whole at
// once, and the keys committed before the restart are not counted as new.
func TestObservedFPRestart(t *testing.T) {
	const gens, per, probes = 2, 20_000, 500
	span := time.Hour
	for _, from := range []string{"snapshot", "log"} {
		t.Run(from, func(t *testing.T) {
			dir := t.TempDir()
			clk := testclock.New(t0)
			o := Options{Dir: dir, Probabilistic: true, Window: gens * span, Generations: gens,
				ExpectedRate: per / span.Seconds(), FalsePositiveRate: 0.05, Now: clk.Now, SnapshotInterval: -1}
			e, err := Open(o)
			if err != nil {
				t.Fatal(err)
			}
			held := fillWindow(t, e, clk, gens, per, span)
			if from == "snapshot" {
				if err := e.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openT(t, o)
			if st := e.Stats(); st.RestoredFrom != from {
				t.Fatalf("restored from %q, want %q", st.RestoredFrom, from)
			}
			var next uint64
			if g, _ := observeAll(t, e, held); g[Duplicate] != len(held) {
				t.Fatalf("held keys after the restart: %v", g)
			}
			got, _ := observeAll(t, e, sampledKeys(e, 2, &next, probes))
			st := e.Stats()
			switch from {
			case "snapshot":
				if st.ObservedFPSamples != 0 {
					t.Fatalf("%d samples counted while restored generations are live", st.ObservedFPSamples)
				}
			case "log":
				if st.ObservedFPSamples != probes || st.ObservedFPRate != float64(got[Duplicate])/probes {
					t.Fatalf("observed %d samples at %g, want %d at %g (%d held keys)", st.ObservedFPSamples, st.ObservedFPRate, probes, float64(got[Duplicate])/probes, len(held))
				}
			}
			mustCommit(t, e, "")
			// Once every generation restored has expired, the shadow is
			// whole again.
			clk.Advance(time.Duration(gens+1) * span)
			got, _ = observeAll(t, e, sampledKeys(e, 3, &next, probes))
			st2 := e.Stats()
			if n := st2.ObservedFPSamples - st.ObservedFPSamples; n != probes {
				t.Fatalf("%s: %d samples counted after the restored generations expired, want %d (%v)", from, n, probes, got)
			}
		})
	}
}
