package dedup_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

var (
	metaSeed = flag.Int64("metamorphic.seed", -1, "replay one seed of TestMetamorphic (printed by a failure)")
	metaLong = flag.Bool("metamorphic.long", false, "run TestMetamorphic over many more seeds and operations")
	metaOps  = flag.Int("metamorphic.ops", 0, "operations per seed in TestMetamorphic (default 600, 3000 with -metamorphic.long)")
)

// metaConfig is one engine configuration of the metamorphic test.
type metaConfig struct {
	kind   string
	shards int
	gens   int
	prob   bool
}

func (c metaConfig) String() string {
	return fmt.Sprintf("%s/shards=%d/gens=%d/prob=%v", c.kind, c.shards, c.gens, c.prob)
}

// metaConfigs is the full grid: every backend, shard count, generation
// count and mode. Seed s runs metaConfigs()[s % len].
func metaConfigs() []metaConfig {
	var cs []metaConfig
	for _, kind := range []string{"bloom", "cuckoo", "blocked", "interleaved", "wide", "fuse"} {
		for _, shards := range []int{1, 4, 16} {
			for _, gens := range []int{1, 3, 8} {
				for _, prob := range []bool{false, true} {
					cs = append(cs, metaConfig{kind, shards, gens, prob})
				}
			}
		}
	}
	return cs
}

// metaOracle extends the oracle of oracle_test.go with what crashes, closes
// and Forget need: the committed entry a key had before it was observed New
// again (in the grace span), so that dropping the uncommitted sighting
// restores it rather than forgetting the key altogether.
type metaOracle struct {
	*oracle
	prev map[string]*oracleEntry
}

func newMetaOracle(w time.Duration, n int) *metaOracle {
	return &metaOracle{
		oracle: &oracle{window: w, span: w / time.Duration(n), seen: map[string]*oracleEntry{}},
		prev:   map[string]*oracleEntry{},
	}
}

func (o *metaOracle) recordNew(key string, now, hw time.Time) {
	if old := o.seen[key]; old != nil && old.committed {
		o.prev[key] = old
	}
	o.record(key, New, now, hw)
}

func (o *metaOracle) commitAll() {
	for _, k := range o.inflight {
		delete(o.prev, k)
	}
	o.commit()
}

// drop forgets the uncommitted sighting of key (Forget, or a crash).
func (o *metaOracle) drop(key string) {
	if p := o.prev[key]; p != nil {
		o.seen[key] = p
		delete(o.prev, key)
	} else {
		delete(o.seen, key)
	}
}

// dropInflight is a crash, or Close without AutoCommit: every key in flight
// is forgotten.
func (o *metaOracle) dropInflight() {
	for _, k := range o.inflight {
		o.drop(k)
	}
	o.inflight = o.inflight[:0]
}

// metaResult is what one seed contributes to the probabilistic bound.
type metaResult struct {
	prob         bool
	fps, news    int
	ops, reopens int
	crashes      int
}

// TestMetamorphic runs seeded random sequences of every engine operation —
// Observe, ObserveBatch with in-batch repeats and repeats at many delays,
// Commit with and without checkpoints, Forget, clock steps forwards and
// backwards, Snapshot, crash-and-reopen on a CrashClone keeping a random
// share of unsynced data, Close and reopen with another ExpectedRate — over
// every configuration of the grid, and compares each verdict with the
// oracle: exact mode must agree outside the grace span; probabilistic mode
// may only turn a New into a Duplicate, within its false-positive bound.
// Checkpoint, InFlightKeys and the Forget results are checked throughout.
//
// A failure names its seed; -metamorphic.seed=N replays it and
// -metamorphic.long runs twenty times as many seeds, each ten times longer.
func TestMetamorphic(t *testing.T) {
	cfgs := metaConfigs()
	ops := *metaOps
	if ops == 0 {
		ops = 600
		if *metaLong {
			ops = 3000
		}
	}
	if *metaSeed >= 0 {
		res := runMetamorphic(t, uint64(*metaSeed), cfgs, ops)
		t.Logf("seed %d: %+v", *metaSeed, res)
		return
	}
	seeds := len(cfgs)
	if *metaLong {
		seeds *= 20
	}
	var mu sync.Mutex
	var fps, news, reopens, crashes int
	t.Run("seeds", func(t *testing.T) {
		for s := 1; s <= seeds; s++ {
			seed := uint64(s)
			t.Run(fmt.Sprintf("seed=%d/%v", seed, cfgs[seed%uint64(len(cfgs))]), func(t *testing.T) {
				t.Parallel()
				res := runMetamorphic(t, seed, cfgs, ops)
				mu.Lock()
				defer mu.Unlock()
				if res.prob {
					fps += res.fps
					news += res.news
				}
				reopens += res.reopens
				crashes += res.crashes
			})
		}
	})
	// Across every probabilistic seed: the configured 1% plus 4 sigma.
	rate := float64(fps) / float64(max(news, 1))
	sigma := math.Sqrt(0.01 * 0.99 / float64(max(news, 1)))
	t.Logf("probabilistic false drops: %d of %d new keys (%.4f); %d reopens, %d crashes", fps, news, rate, reopens, crashes)
	if rate > 0.01+4*sigma {
		t.Fatalf("probabilistic false drops %d of %d (%.4f) exceed 1%% + 4 sigma", fps, news, rate)
	}
}

func runMetamorphic(t *testing.T, seed uint64, cfgs []metaConfig, ops int) (res metaResult) {
	cfg := cfgs[seed%uint64(len(cfgs))]
	res.prob = cfg.prob
	const W = time.Minute
	r := rand.New(rand.NewPCG(seed, 0x6d657461))
	clk := testclock.New(t0.Add(time.Duration(r.Int64N(int64(W)))))
	hw := clk.Now()
	mem := vfs.NewCrashableMem()
	rates := []float64{2, 40, 600}
	opts := Options{Dir: "/meta", FS: mem, Filter: cfg.kind, Shards: cfg.shards, Generations: cfg.gens,
		Probabilistic: cfg.prob, Window: W, ExpectedRate: rates[r.IntN(len(rates))], FalsePositiveRate: 0.01,
		MaxKeySize: 64, Now: clk.Now}
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (%v) step %d: %s\nreplay: go test -run 'TestMetamorphic$' -metamorphic.seed=%d", seed, cfg, step, fmt.Sprintf(format, args...), seed)
	}
	e, err := Open(opts)
	if err != nil {
		fail(0, "Open: %v", err)
	}
	defer func() { _ = e.Close() }()

	o := newMetaOracle(W, cfg.gens)
	var history []string
	var lastCP []byte // the last checkpoint committed
	nextKey := 0
	newKey := func() string {
		nextKey++
		k := fmt.Sprintf("m%d-%d", seed, nextKey)
		history = append(history, k)
		return k
	}
	// oldKey picks a key from the history, at a delay spread over all of it.
	oldKey := func() string {
		if len(history) == 0 {
			return newKey()
		}
		back := int(float64(len(history)) * r.Float64() * r.Float64())
		return history[len(history)-1-back]
	}
	check := func(step int, key string, got Verdict) {
		now := clk.Now()
		want := o.expect(key, now, hw)
		switch {
		case want == 0:
		case got == want:
		case cfg.prob && want == New && got == Duplicate:
			res.fps++
		default:
			fail(step, "key %q at +%v (hw +%v): engine %v, oracle %v (entry %+v)", key, now.Sub(t0), hw.Sub(t0), got, want, o.seen[key])
		}
		if want == New || (want == 0 && got == New) {
			res.news++
		}
		if got == New {
			o.recordNew(key, now, hw)
		}
	}
	reopen := func(step int, crash bool) {
		if crash {
			clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: r.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(step)))})
			_ = e.Close() // the "dead" process's files are discarded
			mem = clone
			res.crashes++
		} else if err := e.Close(); err != nil {
			fail(step, "Close: %v", err)
		}
		o.dropInflight()
		opts.FS = mem
		opts.ExpectedRate = rates[r.IntN(len(rates))] // not persisted: may change
		if e, err = Open(opts); err != nil {
			fail(step, "reopen (crash=%v): %v", crash, err)
		}
		res.reopens++
		if got := e.Checkpoint(); string(got) != string(lastCP) || (got == nil) != (lastCP == nil) {
			fail(step, "Checkpoint after reopen (crash=%v) = %q, want %q", crash, got, lastCP)
		}
		if st := e.Stats(); st.InFlightKeys != 0 {
			fail(step, "InFlightKeys after reopen = %d", st.InFlightKeys)
		}
	}
	batch := make([][]byte, 0, 24)
	bkeys := make([]string, 0, 24)
	out := make([]Verdict, 24)
	for step := 1; step <= ops; step++ {
		res.ops++
		switch x := r.IntN(1000); {
		case x < 260: // a new key
			k := newKey()
			v, err := e.Observe([]byte(k))
			if err != nil {
				fail(step, "Observe: %v", err)
			}
			check(step, k, v)
		case x < 500: // a repeat
			k := oldKey()
			v, err := e.Observe([]byte(k))
			if err != nil {
				fail(step, "Observe: %v", err)
			}
			check(step, k, v)
		case x < 600: // a batch: new keys, repeats, and repeats within the batch
			batch, bkeys = batch[:0], bkeys[:0]
			for n := 1 + r.IntN(cap(batch)); len(batch) < n; {
				var k string
				switch y := r.IntN(10); {
				case y < 4:
					k = newKey()
				case y < 8 || len(bkeys) == 0:
					k = oldKey()
				default:
					k = bkeys[r.IntN(len(bkeys))]
				}
				batch = append(batch, []byte(k))
				bkeys = append(bkeys, k)
			}
			if err := e.ObserveBatch(batch, out); err != nil {
				fail(step, "ObserveBatch: %v", err)
			}
			for i, k := range bkeys {
				check(step, k, out[i])
			}
		case x < 690: // commit
			var cp []byte
			if r.IntN(5) > 0 {
				cp = fmt.Appendf(nil, "cp-%d", step)
			}
			if err := e.Commit(cp); err != nil {
				fail(step, "Commit: %v", err)
			}
			o.commitAll()
			if cp != nil {
				lastCP = cp
			}
		case x < 720: // forget a key in flight, or one that is not
			if len(o.inflight) > 0 && r.IntN(4) > 0 {
				j := r.IntN(len(o.inflight))
				k := o.inflight[j]
				if err := e.Forget([]byte(k)); err != nil {
					fail(step, "Forget(%q) of a key in flight: %v", k, err)
				}
				o.drop(k)
				o.inflight = append(o.inflight[:j], o.inflight[j+1:]...)
			} else {
				k := oldKey()
				if en := o.seen[k]; en != nil && !en.committed {
					break
				}
				if err := e.Forget([]byte(k)); !errors.Is(err, ErrNotInFlight) {
					fail(step, "Forget(%q) of a key not in flight = %v, want ErrNotInFlight", k, err)
				}
			}
		case x < 880: // a small step forward
			clk.Advance(time.Duration(r.Int64N(int64(W / 25))))
		case x < 905: // a jump forward, up to 2.5 windows
			clk.Advance(time.Duration(r.Int64N(int64(5 * W / 2))))
		case x < 920: // a step back, up to a window
			clk.Advance(-time.Duration(r.Int64N(int64(W))))
		case x < 945:
			if err := e.Snapshot(); err != nil {
				fail(step, "Snapshot: %v", err)
			}
		case x < 955:
			reopen(step, true)
		case x < 965:
			reopen(step, false)
		default: // invariants
			if got := e.Checkpoint(); string(got) != string(lastCP) {
				fail(step, "Checkpoint = %q, want %q", got, lastCP)
			}
			if st := e.Stats(); st.InFlightKeys != int64(len(o.inflight)) {
				fail(step, "InFlightKeys = %d, oracle holds %d", st.InFlightKeys, len(o.inflight))
			}
		}
		if now := clk.Now(); now.After(hw) {
			hw = now
		}
	}
	// The end: commit, crash, and every key is checked once more.
	if err := e.Commit([]byte("final")); err != nil {
		fail(ops+1, "final Commit: %v", err)
	}
	o.commitAll()
	lastCP = []byte("final")
	reopen(ops+1, true)
	for _, k := range history {
		v, err := e.Observe([]byte(k))
		if err != nil {
			fail(ops+2, "Observe: %v", err)
		}
		check(ops+2, k, v)
	}
	if cfg.prob && res.news > 0 {
		// Per seed, loosely: 1% plus 5 sigma plus 2 events.
		rate := float64(res.fps) / float64(res.news)
		if rate > 0.01+5*math.Sqrt(0.0099/float64(res.news))+2/float64(res.news) {
			fail(ops+2, "probabilistic false drops %d of %d new keys", res.fps, res.news)
		}
	}
	return res
}
