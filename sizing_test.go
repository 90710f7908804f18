package dedup_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

// TestFiltersFollowTraffic opens, for Filter blocked (the default) and
// bloom, two engines on the README's one-day window, one told a rate 100x
// the real one and one told the real rate, and feeds both the same keys
// for three windows. After the first generation, and at every generation
// from then on, the first holds at most 2x the filter memory of the
// second; it sizes new generations for about the rate that arrives; and
// neither has lost a key of the last window, through a snapshot and a
// reopen from it. Open logs no estimate of filters the machine holds.
func TestFiltersFollowTraffic(t *testing.T) {
	const gens, perGen = 4, 8000 // keys per 6h generation
	W := 24 * time.Hour
	span := W / gens
	rate := float64(perGen) / span.Seconds()
	for _, kind := range []string{"blocked", "bloom"} {
		t.Run(kind, func(t *testing.T) {
			clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			var logged logLines
			logf := logged.logf
			dirBig := t.TempDir()
			open := func(dir string, expected float64) *Engine {
				return openT(t, Options{Dir: dir, Filter: kind, Probabilistic: true, Window: W, Generations: gens, Shards: 4,
					ExpectedRate: expected, Now: clk.Now, Logf: logf, SnapshotInterval: -1})
			}
			big, right := open(dirBig, 100*rate), open("", rate)
			// A ceiling the machine holds is no news: Open says nothing
			// (a pipe tool's stderr stays quiet).
			if l := logged.containing("filters"); len(l) != 0 {
				t.Fatalf("Open logged %q for filters this machine holds", l)
			}
			var keys [][]byte
			// fresh[i] is whether both engines found keys[i] New: a false
			// positive of a generation that expires by the end would be
			// New there, rightly.
			var fresh []bool
			for g := range 3 * gens {
				keys, fresh = keys[:0], fresh[:0]
				for i := range perGen {
					keys = append(keys, fmt.Appendf(nil, "g%d-k%d", g, i))
					fresh = append(fresh, true)
				}
				// A generation's keys arrive over its whole span.
				for part := range 8 {
					from, to := part*perGen/8, (part+1)*perGen/8
					for _, e := range []*Engine{big, right} {
						out := make([]Verdict, to-from)
						if err := e.ObserveBatch(keys[from:to], out); err != nil {
							t.Fatal(err)
						}
						for i, v := range out {
							fresh[from+i] = fresh[from+i] && v == New
						}
						mustCommit(t, e, "")
					}
					clk.Advance(span / 8)
				}
				sb, sr := big.Stats(), right.Stats()
				if g == 0 {
					t.Logf("first generation: told 100x %d filter bytes (journal included), told right %d", sb.FilterBytes, sr.FilterBytes)
					continue
				}
				if sb.FilterBytes > 2*sr.FilterBytes {
					t.Fatalf("after generation %d: told 100x holds %d filter bytes, told right %d", g, sb.FilterBytes, sr.FilterBytes)
				}
			}
			sb, sr := big.Stats(), right.Stats()
			t.Logf("told 100x: %d filter bytes, sized for %d keys per generation; told right: %d bytes, %d keys",
				sb.FilterBytes, sb.SizedGenerationKeys, sr.FilterBytes, sr.SizedGenerationKeys)
			if sb.SizedGenerationKeys > 2*perGen || sb.SizedGenerationKeys < perGen {
				t.Fatalf("sized for %d keys per generation, %d arrive", sb.SizedGenerationKeys, perGen)
			}
			if err := big.Snapshot(); err != nil {
				t.Fatal(err)
			}
			if err := big.Close(); err != nil {
				t.Fatal(err)
			}
			big = openT(t, Options{Dir: dirBig, Now: clk.Now, Logf: logf, SnapshotInterval: -1})
			if st := big.Stats(); st.RestoredFrom != "snapshot" {
				t.Fatalf("reopened from %q", st.RestoredFrom)
			}
			lines := logged.all()
			last := lines[len(lines)-1]
			if !strings.Contains(last, "generations are sized for") {
				t.Fatalf("reopen logged %q, no estimate", last)
			}
			t.Logf("reopen logged: %s", last)
			clk.Advance(-span / 2) // inside the last window of every key of the last generation
			for _, e := range []*Engine{big, right} {
				for i, k := range keys {
					if !fresh[i] {
						continue
					}
					if v, err := e.Observe(k); err != nil || v != Duplicate {
						t.Fatalf("key %s: %v, %v after three windows", k, v, err)
					}
				}
			}
		})
	}
}

// TestSizingNoFalseNegatives drives engines whose filters follow the
// traffic (told 50x the rate, so the first generation grows from its
// journal and later ones are sized from the rate measured, with a 10x burst
// that chains) through rotation, snapshots, reopening from a snapshot and
// from the commit log or store (IgnoreSnapshots), and crashes keeping a
// random share of unsynced data, for blocked and bloom in both modes.
// Every key committed New less than a window ago must be a Duplicate when
// it comes again.
func TestSizingNoFalseNegatives(t *testing.T) {
	for _, kind := range []string{"blocked", "bloom", "fuse"} {
		for _, prob := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/prob=%v", kind, prob), func(t *testing.T) {
				t.Parallel()
				runSizingOracle(t, kind, prob)
			})
		}
	}
}

func runSizingOracle(t *testing.T, kind string, prob bool) {
	const W, gens, perGen = time.Hour, 4, 6000
	span := W / gens
	const steps = 20 // per span
	clk := testclock.New(t0)
	r := rand.New(rand.NewPCG(uint64(len(kind)), map[bool]uint64{true: 1, false: 2}[prob]))
	mem := vfs.NewCrashableMem()
	opts := Options{Dir: "/s", FS: mem, Filter: kind, Probabilistic: prob, Window: W, Generations: gens, Shards: 2,
		ExpectedRate: 50 * perGen / span.Seconds(), Now: clk.Now, SnapshotInterval: -1}
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if e != nil {
			_ = e.Close()
		}
	}()
	committed := map[string]time.Time{} // key -> when it was observed New and committed
	var history []string
	next := 0
	reopen := func(crash, ignoreSnapshots bool) {
		if crash {
			if err := e.Commit(nil); err != nil { // crash after a commit: no key in flight
				t.Fatal(err)
			}
			clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: r.IntN(101), RNG: r})
			_ = e.Close()
			mem = clone
		} else if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		o := opts
		o.FS, o.IgnoreSnapshots = mem, ignoreSnapshots
		if e, err = Open(o); err != nil {
			e = nil
			t.Fatalf("reopen (crash %v, ignore snapshots %v): %v", crash, ignoreSnapshots, err)
		}
	}
	var snapshots, reopens int
	for step := range 5 * gens * steps {
		n := perGen / steps
		if step/steps == 2*gens+1 {
			n *= 10 // a burst past the sizing of one generation
		}
		keys := make([][]byte, 0, n+n/4)
		for range n {
			next++
			keys = append(keys, fmt.Appendf(nil, "%s-%d", kind, next))
		}
		inBatch := map[string]bool{}
		for range n / 4 {
			if len(history) > 0 {
				// (A key once per batch: a second one would be InFlight.)
				if k := history[r.IntN(len(history))]; !inBatch[k] {
					inBatch[k] = true
					keys = append(keys, []byte(k))
				}
			}
		}
		out := make([]Verdict, len(keys))
		if err := e.ObserveBatch(keys, out); err != nil {
			t.Fatal(err)
		}
		now := clk.Now()
		for i, k := range keys {
			at, ok := committed[string(k)]
			switch {
			case ok && now.Sub(at) < W && out[i] != Duplicate:
				t.Fatalf("step %d: key %s committed %v ago: %v (a filter lost it)", step, k, now.Sub(at), out[i])
			case out[i] == New:
				committed[string(k)] = now
				history = append(history, string(k))
			}
		}
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		switch x := r.IntN(100); {
		case x < 8:
			if err := e.Snapshot(); err != nil {
				t.Fatal(err)
			}
			snapshots++
		case x < 11:
			reopen(false, false)
			reopens++
		case x < 13 && (!prob || snapshots == 0):
			// (A probabilistic state's log is truncated by its snapshots.)
			reopen(false, true)
			reopens++
		case x < 15:
			reopen(true, false)
			reopens++
		}
		clk.Advance(span / steps)
		// Forget keys past the window.
		if step%steps == 0 {
			j := 0
			for _, k := range history {
				if clk.Now().Sub(committed[k]) < W+span {
					history[j] = k
					j++
				}
			}
			history = history[:j]
		}
	}
	st := e.Stats()
	t.Logf("%d keys, %d snapshots, %d reopens; filters %d bytes, sized for %d keys per generation (%d arrive)",
		next, snapshots, reopens, st.FilterBytes, st.SizedGenerationKeys, perGen)
}

// TestEngineFPOnTarget feeds a probabilistic engine told the right rate a
// full window (every live generation holding a span's keys, just before a
// rotation: the peak) and measures the share of never-seen keys it calls
// Duplicate. It must be on the target: within [0.9, 1.0] x 1%, widened by
// 4 binomial sigmas of the measure (sigma = sqrt(q(1-q)/P), 1.6% of q at
// P = 400k probes). Shards hold 100k keys a generation, so the capacity's
// headroom for the keys' spread over shards (two deviations, 0.65%) costs
// about 3% of the rate.
func TestEngineFPOnTarget(t *testing.T) {
	const gens, shards, perGen, probes = 4, 2, 200_000, 400_000
	const fp = 0.01
	span := time.Hour
	for _, kind := range []string{"blocked", "bloom", "fuse"} {
		t.Run(kind, func(t *testing.T) {
			clk := testclock.New(t0)
			dir := "" // fuse needs one: its newest generation's hashes wait there
			if kind == "fuse" {
				dir = t.TempDir()
			}
			e := openT(t, Options{Dir: dir, Filter: kind, Probabilistic: true, Window: gens * span, Generations: gens, Shards: shards,
				ExpectedRate: perGen / span.Seconds(), FalsePositiveRate: fp, Now: clk.Now, MaxInFlight: 1 << 20, SnapshotInterval: -1})
			const batch = 4000
			keys := make([][]byte, batch)
			out := make([]Verdict, batch)
			n := 0
			fill := func(prefix string, count int, commit bool) (dups int) {
				for i := 0; i < count; i += batch {
					for j := range keys {
						keys[j] = fmt.Appendf(keys[j][:0], "%s-%d", prefix, n)
						n++
					}
					if err := e.ObserveBatch(keys, out); err != nil {
						t.Fatal(err)
					}
					for _, v := range out {
						if v == Duplicate {
							dups++
						}
					}
					if commit {
						mustCommit(t, e, "")
						clk.Advance(span * batch / perGen)
					}
				}
				return dups
			}
			fill("k", (gens+1)*perGen, true)
			clk.Advance(-time.Nanosecond) // the last generation's end: all gens+1 are live and full
			st := e.Stats()
			if st.Generations != (gens+1)*shards {
				t.Fatalf("%d live generations, want %d", st.Generations, (gens+1)*shards)
			}
			got := float64(fill("probe", probes, false)) / probes
			sigma := math.Sqrt(got * (1 - got) / probes)
			t.Logf("measured %.5f (%.3f of the target), estimate %.5f, %.3f filter bytes per window key",
				got, got/fp, st.EstimatedFPRate, float64(st.FilterBytes)/float64(gens*perGen))
			if got < 0.9*fp-4*sigma || got > fp+4*sigma {
				t.Fatalf("measured FP %.5f outside [0.9, 1.0] x %g (+-4 sigma, sigma %.5f)", got, fp, sigma)
			}
		})
	}
}
