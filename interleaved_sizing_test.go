package dedup_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

// TestInterleavedFollowsTraffic opens two engines with Filter interleaved
// on a one-day window, one told a rate 100x the real one, one told the
// real rate, and feeds both the same keys for three windows. The filters
// of the first grow with the keys of its first generation and are then
// sized from the rate measured: after the first generation and at the end
// it holds at most 2x the filter memory of the one told right, and neither
// has lost a key of the last window. Open logs the estimate; Stats reports
// the sizing and the observed FP.
func TestInterleavedFollowsTraffic(t *testing.T) {
	const gens, perGen = 4, 4000 // keys per 6h generation
	W := 24 * time.Hour
	span := W / gens
	rate := float64(perGen) / span.Seconds()
	clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var logged logLines
	open := func(expected float64) *Engine {
		return openT(t, Options{Filter: "interleaved", Probabilistic: true, Window: W, Generations: gens, Shards: 4,
			ExpectedRate: expected, Now: clk.Now, Logf: logged.logf})
	}
	big, right := open(100*rate), open(rate)
	if l := logged.containing("filters"); len(l) != 0 {
		t.Fatalf("Open logged %q for filters this machine holds", l)
	}
	var startBig, startRight Stats
	var keys [][]byte
	for g := range 3 * gens {
		keys = keys[:0]
		for i := range perGen {
			keys = append(keys, fmt.Appendf(nil, "g%d-k%d", g, i))
		}
		for _, e := range []*Engine{big, right} {
			out := make([]Verdict, len(keys))
			if err := e.ObserveBatch(keys, out); err != nil {
				t.Fatal(err)
			}
			mustCommit(t, e, "")
		}
		if g == 0 {
			startBig, startRight = big.Stats(), right.Stats()
		}
		clk.Advance(span)
	}
	clk.Advance(-span / 2) // inside the last window of every key of the last generation
	for _, e := range []*Engine{big, right} {
		for _, k := range keys {
			if v, err := e.Observe(k); err != nil || v != Duplicate {
				t.Fatalf("key %s: %v, %v after three windows", k, v, err)
			}
		}
	}
	sb, sr := big.Stats(), right.Stats()
	t.Logf("told 100x: %d filter bytes after a generation, %d now, sized for %d keys per generation; told right: %d bytes, then %d, %d keys",
		startBig.FilterBytes, sb.FilterBytes, sb.SizedGenerationKeys, startRight.FilterBytes, sr.FilterBytes, sr.SizedGenerationKeys)
	// From the first generation on (its table grows from the keys seen),
	// and at the end.
	if startBig.FilterBytes > 2*startRight.FilterBytes || sb.FilterBytes > 2*sr.FilterBytes {
		t.Fatalf("told 100x the rate: %d then %d filter bytes, told right: %d then %d",
			startBig.FilterBytes, sb.FilterBytes, startRight.FilterBytes, sr.FilterBytes)
	}
	if sb.SizedGenerationKeys > 3*perGen || sb.SizedGenerationKeys < perGen {
		t.Fatalf("sized for %d keys per generation, %d arrive", sb.SizedGenerationKeys, perGen)
	}
	// 3 windows of 4 x 4000 new keys, plus the last 4000 probed again
	// (held: not sampled): about 48000/1024 sampled.
	if n := sb.ObservedFPSamples; n < 20 || n > 100 || sb.ObservedFPRate > 0.05 {
		t.Fatalf("observed FP: %d samples, rate %g", n, sb.ObservedFPRate)
	}
}
