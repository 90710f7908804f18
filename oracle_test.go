package dedup_test

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

var oracleEvents = flag.Int("oracle.events", 60000, "events per configuration in the oracle tests")

// TestOracle runs a long random stream, with duplicates at many delays and
// a clock that mostly moves forward, through the engine and the model:
// exact mode must agree verdict for verdict (outside the grace span);
// probabilistic mode may only turn New into Duplicate, at no more than its
// false-positive rate.
func TestOracle(t *testing.T) {
	for _, kind := range []string{"bloom", "cuckoo", "blocked", "interleaved", "wide", "fuse"} {
		for _, prob := range []bool{false, true} {
			for _, shards := range []int{1, 16} {
				name := fmt.Sprintf("%s/prob=%v/shards=%d", kind, prob, shards)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					runOracle(t, kind, prob, shards, uint64(len(name)), *oracleEvents)
				})
			}
		}
	}
}

func runOracle(t *testing.T, kind string, prob bool, shards int, seed uint64, events int) {
	const W = 10 * time.Minute
	const N = 5
	clk := testclock.New(t0)
	// A small ExpectedRate makes the filters grow many times over.
	o0 := Options{Filter: kind, Probabilistic: prob, Shards: shards, Window: W, Generations: N,
		ExpectedRate: 5, FalsePositiveRate: 0.01, Now: clk.Now}
	if kind == "fuse" { // it needs a Dir (for the newest generation's hashes)
		o0.Dir, o0.FS, o0.SnapshotInterval = "/oracle", vfs.NewMem(), -1
	}
	e := openT(t, o0)
	o := &oracle{window: W, span: W / N, seen: map[string]*oracleEntry{}}
	r := rand.New(rand.NewPCG(seed, 7))
	var history []string
	hw := clk.Now()
	var fps, news int
	batch := make([][]byte, 0, 32)
	out := make([]Verdict, 32)
	check := func(key string, got Verdict, now time.Time) {
		want := o.expect(key, now, hw)
		switch {
		case want == 0:
		case got == want:
		case prob && want == New && got == Duplicate:
			fps++
		default:
			en := o.seen[key]
			t.Fatalf("seed %d: key %q at +%v: engine %v, oracle %v (entry %+v)", seed, key, now.Sub(t0), got, want, en)
		}
		if want == New || (want == 0 && got == New) {
			news++
		}
		if got == New {
			o.record(key, got, now, hw)
		}
	}
	for i := 0; i < events; i++ {
		// The clock: mostly small steps forward, sometimes a jump, rarely back.
		switch x := r.Float64(); {
		case x < 0.001:
			clk.Advance(-time.Duration(r.Int64N(int64(W))))
		case x < 0.003:
			clk.Advance(time.Duration(r.Int64N(int64(2 * W))))
		default:
			clk.Advance(time.Duration(r.Int64N(int64(40 * time.Millisecond))))
		}
		now := clk.Now()
		if now.After(hw) {
			hw = now
		}
		var key string
		if len(history) == 0 || r.Float64() < 0.5 {
			key = fmt.Sprintf("ev-%d-%d", seed, i)
			history = append(history, key)
		} else {
			// Repeat a key from a delay spread over the whole history.
			back := int(float64(len(history)) * r.Float64() * r.Float64())
			key = history[len(history)-1-back]
		}
		if r.IntN(4) == 0 { // through ObserveBatch, flushed at once to keep time order
			batch = append(batch[:0], []byte(key))
			if err := e.ObserveBatch(batch, out); err != nil {
				t.Fatal(err)
			}
			check(key, out[0], now)
		} else {
			got, err := e.Observe([]byte(key))
			if err != nil {
				t.Fatal(err)
			}
			check(key, got, now)
		}
		switch x := r.Float64(); {
		case x < 0.02:
			if err := e.Commit([]byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
			o.commit()
		case x < 0.025 && len(o.inflight) > 0:
			j := r.IntN(len(o.inflight))
			k := o.inflight[j]
			if err := e.Forget([]byte(k)); err != nil {
				t.Fatalf("Forget(%q): %v", k, err)
			}
			delete(o.seen, k)
			o.inflight = append(o.inflight[:j], o.inflight[j+1:]...)
		}
	}
	if prob {
		// Bound: the configured 1% plus 4 binomial sigmas.
		rate := float64(fps) / float64(max(news, 1))
		sigma := math.Sqrt(0.01 * 0.99 / float64(max(news, 1)))
		if rate > 0.01+4*sigma {
			t.Fatalf("probabilistic false drops %d of %d new keys (%.4f) exceed 1%% + 4 sigma", fps, news, rate)
		}
		t.Logf("false drops: %d of %d new keys (%.4f)", fps, news, rate)
	}
	st := e.Stats()
	t.Logf("stats: observed %d new %d dup %d inflight %d lookups %d fps %d gens %d bytes %d",
		st.Observed, st.New, st.Duplicate, st.InFlightVerdicts, st.StoreLookups, st.FalsePositives, st.Generations, st.FilterBytes)
}
