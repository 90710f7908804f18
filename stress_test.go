package dedup_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

// sighting is one New verdict: the clock readings just before and just
// after the Observe that returned it.
type sighting struct{ before, after time.Time }

// TestStress races Observe, ObserveBatch and Forget against Commit (with
// checkpoints), a clock that keeps rotating and expiring generations,
// Snapshot and Stats, under -race, and checks the invariants:
//   - no key is New twice within the window (two New verdicts for a key are
//     at least Window apart, allowing for the clock readings around them);
//   - Checkpoint never goes backwards, Stats stays sane while it runs;
//   - after a final Commit, InFlightKeys is 0 and the counters add up
//     (Observed = New + Duplicate + InFlight; New = CommittedKeys + Forgets);
//   - after a crash, every key observed New in the last half window is
//     Duplicate.
func TestStress(t *testing.T) {
	for _, kind := range []string{"blocked", "interleaved", "wide"} {
		for _, prob := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/prob=%v", kind, prob), func(t *testing.T) {
				t.Parallel()
				runStress(t, prob, kind)
			})
		}
	}
}

func runStress(t *testing.T, prob bool, kind string) {
	const (
		W        = 10 * time.Second
		gens     = 4
		mainKeys = 2000
		fKeys    = 300
		ops      = 4000
	)
	mem := vfs.NewCrashableMem()
	clk := testclock.New(t0)
	o := Options{Dir: "/stress", FS: mem, Probabilistic: prob, Filter: kind, Window: W, Generations: gens, Shards: 4,
		ExpectedRate: 200, Now: clk.Now}
	e, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()

	var smu sync.Mutex
	sightings := make([][]sighting, mainKeys)
	record := func(k int, s sighting) {
		smu.Lock()
		sightings[k] = append(sightings[k], s)
		smu.Unlock()
	}
	var forgets atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	// Observers: two single, two batched.
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			keys := make([][]byte, 16)
			idx := make([]int, 16)
			out := make([]Verdict, 16)
			for i := 0; i < ops; i++ {
				if i%20 == 0 { // the clock moves with the work: windows go by
					clk.Advance(W / 100)
				}
				if w < 2 {
					k := r.IntN(mainKeys)
					before := clk.Now()
					v, err := e.Observe(fmt.Appendf(nil, "k%d", k))
					if err != nil {
						report(err)
						return
					}
					if v == New {
						record(k, sighting{before, clk.Now()})
					}
					continue
				}
				for j := range keys {
					idx[j] = r.IntN(mainKeys)
					keys[j] = fmt.Appendf(nil, "k%d", idx[j])
				}
				before := clk.Now()
				if err := e.ObserveBatch(keys, out); err != nil {
					report(err)
					return
				}
				after := clk.Now()
				seen := map[int]bool{}
				for j, v := range out {
					if v == New {
						if seen[idx[j]] {
							report(fmt.Errorf("key k%d New twice in one batch", idx[j]))
						}
						record(idx[j], sighting{before, after})
					}
					seen[idx[j]] = true
				}
				i += 3 // a batch of 16 counts as 4 operations
			}
		}(w)
	}
	// A forgetter, on keys of its own.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(99, 11))
		for i := 0; i < ops; i++ {
			k := fmt.Appendf(nil, "f%d", r.IntN(fKeys))
			v, err := e.Observe(k)
			if err != nil {
				report(err)
				return
			}
			if v == New && r.IntN(2) == 0 {
				switch err := e.Forget(k); {
				case err == nil:
					forgets.Add(1)
				case errors.Is(err, ErrNotInFlight): // a Commit took it first
				default:
					report(err)
					return
				}
			}
		}
	}()
	// Background: commits, the clock, snapshots, stats, until the workers end.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	loop := func(f func(i int) error) {
		bg.Add(1)
		go func() {
			defer bg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := f(i); err != nil {
					report(err)
					return
				}
			}
		}()
	}
	var lastCP atomic.Int64
	loop(func(i int) error {
		if err := e.Commit(fmt.Appendf(nil, "%d", i)); err != nil {
			return err
		}
		var got int64
		if _, err := fmt.Sscanf(string(e.Checkpoint()), "%d", &got); err != nil {
			return fmt.Errorf("checkpoint %q: %v", e.Checkpoint(), err)
		}
		if prev := lastCP.Swap(got); got < prev {
			return fmt.Errorf("checkpoint went backwards: %d after %d", got, prev)
		}
		time.Sleep(200 * time.Microsecond)
		return nil
	})
	loop(func(int) error {
		clk.Advance(W / 40)
		time.Sleep(500 * time.Microsecond)
		return nil
	})
	loop(func(int) error {
		time.Sleep(3 * time.Millisecond)
		return e.Snapshot()
	})
	loop(func(int) error {
		st := e.Stats()
		if st.InFlightKeys < 0 || st.Generations > o.Shards*(gens+2) || st.Observed < st.New {
			return fmt.Errorf("stats while running: in flight %d, %d generations, observed %d, new %d",
				st.InFlightKeys, st.Generations, st.Observed, st.New)
		}
		time.Sleep(time.Millisecond)
		return nil
	})
	wg.Wait()
	close(stop)
	bg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	mustCommit(t, e, "final")
	st := e.Stats()
	if st.InFlightKeys != 0 {
		t.Fatalf("InFlightKeys = %d after the final commit", st.InFlightKeys)
	}
	if st.Observed != st.New+st.Duplicate+st.InFlightVerdicts {
		t.Fatalf("Observed %d != New %d + Duplicate %d + InFlight %d", st.Observed, st.New, st.Duplicate, st.InFlightVerdicts)
	}
	if st.New != st.CommittedKeys+uint64(forgets.Load()) {
		t.Fatalf("New %d != CommittedKeys %d + Forgets %d", st.New, st.CommittedKeys, forgets.Load())
	}
	var news int
	for k, ss := range sightings {
		news += len(ss)
		// Two sightings violate the window only if, wherever in their
		// [before, after] intervals the engine read its clock, they were
		// less than W apart.
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				a, b := ss[i], ss[j]
				if max(a.after.Sub(b.before), b.after.Sub(a.before)) < W {
					t.Fatalf("key k%d New at +%v..+%v and at +%v..+%v: within the window", k,
						a.before.Sub(t0), a.after.Sub(t0), b.before.Sub(t0), b.after.Sub(t0))
				}
			}
		}
	}
	t.Logf("clock moved %v (%.0f windows); %d New of main keys, %d forgets, %d commits, %d snapshots",
		clk.Now().Sub(t0), float64(clk.Now().Sub(t0))/float64(W), news, forgets.Load(), st.Commits, st.Snapshots)

	// Crash: every key New in the last half window was committed by "final".
	crash := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	o.FS = crash
	e2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if cp := string(e2.Checkpoint()); cp != "final" {
		t.Fatalf("Checkpoint after the crash: %q", cp)
	}
	recent := clk.Now().Add(-W / 2)
	checked := 0
	for k, ss := range sightings {
		if len(ss) == 0 || ss[len(ss)-1].before.Before(recent) {
			continue
		}
		checked++
		mustObserve(t, e2, fmt.Sprintf("k%d", k), Duplicate)
	}
	t.Logf("%d recent keys Duplicate after the crash", checked)
}
