package dedup_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

func TestVerdictLifecycle(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		clk := testclock.New(t0)
		e := openT(t, Options{Probabilistic: prob, Now: clk.Now, Window: time.Minute})
		mustObserve(t, e, "a", New)
		mustObserve(t, e, "a", InFlight)
		mustObserve(t, e, "b", New)
		if err := e.Forget([]byte("b")); err != nil {
			t.Fatal(err)
		}
		if err := e.Forget([]byte("b")); !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("second Forget: %v, want ErrNotInFlight", err)
		}
		mustObserve(t, e, "b", New)
		mustCommit(t, e, "cp1")
		mustObserve(t, e, "a", Duplicate)
		mustObserve(t, e, "b", Duplicate)
		if got := string(e.Checkpoint()); got != "cp1" {
			t.Fatalf("Checkpoint = %q", got)
		}
		mustCommit(t, e, "") // nil keeps the checkpoint
		if got := string(e.Checkpoint()); got != "cp1" {
			t.Fatalf("Checkpoint after Commit(nil) = %q", got)
		}
		st := e.Stats()
		if st.New != 3 || st.Duplicate != 2 || st.InFlightVerdicts != 1 || st.Observed != 6 || st.InFlightKeys != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestWindowEdges(t *testing.T) {
	const W = 80 * time.Second
	const N = 8
	span := W / N
	for _, kind := range []string{"bloom", "cuckoo", "blocked", "interleaved", "wide"} {
		for _, prob := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/probabilistic=%v", kind, prob), func(t *testing.T) {
				clk := testclock.New(t0)
				e := openT(t, Options{Filter: kind, Probabilistic: prob, Now: clk.Now, Window: W, Generations: N})
				// Keys at the start, middle and end of a generation.
				for i, off := range []time.Duration{0, span / 2, span - 1} {
					at := t0.Add(time.Duration(i) * 3 * W).Add(off)
					clk.Set(at)
					key := fmt.Sprintf("k%d", i)
					mustObserve(t, e, key, New)
					mustCommit(t, e, "")
					clk.Set(at.Add(W - time.Nanosecond))
					mustObserve(t, e, key, Duplicate)
					clk.Set(at.Add(W + span))
					mustObserve(t, e, key, New)
					mustCommit(t, e, "")
				}
			})
		}
	}
}

func TestBadInput(t *testing.T) {
	e := openT(t, Options{MaxKeySize: 8})
	if _, err := e.Observe(nil); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("nil key: %v", err)
	}
	if _, err := e.Observe([]byte("123456789")); !errors.Is(err, ErrKeyTooLarge) {
		t.Fatalf("long key: %v", err)
	}
	out := make([]Verdict, 3)
	err := e.ObserveBatch([][]byte{[]byte("a"), nil, []byte("c")}, out)
	if !errors.Is(err, ErrEmptyKey) || !strings.Contains(err.Error(), "entry 1") {
		t.Fatalf("batch with nil entry: %v", err)
	}
	if out[0] != 0 {
		t.Fatal("a rejected batch observed a key")
	}
	if err := e.ObserveBatch([][]byte{[]byte("a")}, nil); !errors.Is(err, ErrBatchLength) {
		t.Fatalf("short out: %v", err)
	}
	mustObserve(t, e, "a", New) // nothing of the rejected batch stayed
	if err := e.Forget(nil); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Forget(nil): %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		o    Options
		name string
	}{
		{Options{Window: -1}, "Window"},
		{Options{ExpectedRate: -5}, "ExpectedRate"},
		{Options{FalsePositiveRate: 1.5}, "FalsePositiveRate"},
		{Options{Filter: "xor"}, "Filter"},
		{Options{Filter: "interleaved", Generations: 16}, "Generations"},
		{Options{Filter: "wide", Generations: 16}, "Generations"},
		{Options{Generations: -1}, "Generations"},
		{Options{Window: time.Millisecond, Generations: 8}, "Generations"},
		{Options{Shards: 1 << 20}, "Shards"},
		{Options{AutoCommit: -1}, "AutoCommit"},
		{Options{MaxInFlight: -1}, "MaxInFlight"},
		{Options{MaxKeySize: -1}, "MaxKeySize"},
	}
	for _, c := range cases {
		_, err := Open(c.o)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("Open(%+v) = %v, want an error naming %s", c.o, err, c.name)
		}
	}
	// Several bad fields are all named.
	_, err := Open(Options{Window: -1, Shards: -1})
	if err == nil || !strings.Contains(err.Error(), "Window") || !strings.Contains(err.Error(), "Shards") {
		t.Fatalf("two bad fields: %v", err)
	}
}

func TestMaxInFlight(t *testing.T) {
	e := openT(t, Options{MaxInFlight: 3})
	for i := 0; i < 3; i++ {
		mustObserve(t, e, fmt.Sprint(i), New)
	}
	if _, err := e.Observe([]byte("x")); !errors.Is(err, ErrTooManyInFlight) {
		t.Fatalf("4th key: %v", err)
	}
	mustObserve(t, e, "0", InFlight) // repeats still answered
	mustCommit(t, e, "")
	mustObserve(t, e, "x", New)
}

func TestReopenDurability(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New(t0)
	o := Options{Dir: dir, Now: clk.Now, Window: time.Hour}
	e := openT(t, o)
	mustObserve(t, e, "committed", New)
	mustCommit(t, e, "offset=1")
	mustObserve(t, e, "uncommitted", New)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Observe([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Observe after Close: %v", err)
	}
	if err := e.Commit(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v", err)
	}
	e2 := openT(t, o)
	mustObserve(t, e2, "committed", Duplicate)
	mustObserve(t, e2, "uncommitted", New) // Close without AutoCommit drops in-flight keys
	if got := string(e2.Checkpoint()); got != "offset=1" {
		t.Fatalf("Checkpoint after reopen = %q", got)
	}
	if st := e2.Stats(); st.RestoredKeys != 1 {
		t.Fatalf("RestoredKeys = %d", st.RestoredKeys)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	// Incompatible options are named.
	for _, bad := range []Options{
		{Dir: dir, Now: clk.Now, Window: 2 * time.Hour},
		{Dir: dir, Now: clk.Now, Window: time.Hour, Shards: 4},
		{Dir: dir, Now: clk.Now, Window: time.Hour, Filter: "bloom"},
		{Dir: dir, Now: clk.Now, Window: time.Hour, Probabilistic: true},
	} {
		_, err := Open(bad)
		if !errors.Is(err, ErrIncompatible) {
			t.Errorf("Open(%+v) = %v, want ErrIncompatible", bad, err)
		}
	}
}

func TestForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := vfs.Default.Create(dir+"/thesis.txt", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("not a dedup state"))
	_ = f.Close()
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Open(foreign dir) = %v, want ErrNotOurs", err)
	}
}

func TestAutoCommit(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, AutoCommit: 5 * time.Millisecond}
	e := openT(t, o)
	mustObserve(t, e, "a", New)
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().InFlightKeys != 0 {
		if time.Now().After(deadline) {
			t.Fatal("AutoCommit never committed")
		}
		time.Sleep(time.Millisecond)
	}
	mustObserve(t, e, "a", Duplicate)
	mustObserve(t, e, "b", New)
	if err := e.Close(); err != nil { // commits b
		t.Fatal(err)
	}
	e2 := openT(t, Options{Dir: dir})
	mustObserve(t, e2, "a", Duplicate)
	mustObserve(t, e2, "b", Duplicate)
}

func TestClockStepsBackwards(t *testing.T) {
	const W = time.Minute
	clk := testclock.New(t0)
	e := openT(t, Options{Now: clk.Now, Window: W, Generations: 4})
	mustObserve(t, e, "a", New)
	mustCommit(t, e, "")
	clk.Advance(-10 * W) // far into the past: nothing expires, nothing panics
	mustObserve(t, e, "a", Duplicate)
	mustObserve(t, e, "b", New)
	mustCommit(t, e, "")
	clk.Set(t0.Add(W - time.Second))
	mustObserve(t, e, "a", Duplicate)
	mustObserve(t, e, "b", Duplicate)
	clk.Set(t0.Add(3 * W))
	mustObserve(t, e, "a", New)
	mustObserve(t, e, "b", New)
}

// TestConcurrentSameKeys: 16 goroutines observe the same keys; each key is
// New exactly once (semantic 1), with commits running meanwhile.
func TestConcurrentSameKeys(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		e := openT(t, Options{Probabilistic: prob, Shards: 4})
		const keys = 5000
		const workers = 16
		var news [keys]int32
		var mu sync.Mutex
		var wg sync.WaitGroup
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					_ = e.Commit(nil)
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 1))
				batch := make([][]byte, 0, 16)
				idx := make([]int, 0, 16)
				out := make([]Verdict, 16)
				for n := 0; n < 3*keys; n++ {
					k := r.IntN(keys)
					if w%2 == 0 {
						v, err := e.Observe([]byte(fmt.Sprintf("key-%d", k)))
						if err != nil {
							t.Error(err)
							return
						}
						if v == New {
							mu.Lock()
							news[k]++
							mu.Unlock()
						}
						continue
					}
					batch = append(batch, []byte(fmt.Sprintf("key-%d", k)))
					idx = append(idx, k)
					if len(batch) == cap(batch) {
						if err := e.ObserveBatch(batch, out); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						for i, v := range out[:len(batch)] {
							if v == New {
								news[idx[i]]++
							}
						}
						mu.Unlock()
						batch, idx = batch[:0], idx[:0]
					}
				}
			}(w)
		}
		wg.Wait()
		close(stop)
		for k, n := range news {
			if n > 1 {
				t.Fatalf("key %d was New %d times", k, n)
			}
		}
	})
}

// TestConcurrentForgetAndCommit races Forget, Observe and Commit on the same
// keys: after every round, the keys whose last verdict was New and that were
// not forgotten are Duplicate.
func TestConcurrentForgetAndCommit(t *testing.T) {
	e := openT(t, Options{Shards: 2})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				k := []byte(fmt.Sprintf("%d-%d", w, i%50))
				v, err := e.Observe(k)
				if err != nil {
					t.Error(err)
					return
				}
				if v == New && i%3 == 0 {
					if err := e.Forget(k); err != nil && !errors.Is(err, ErrNotInFlight) {
						t.Error(err)
						return
					}
				}
				if i%100 == 0 {
					if err := e.Commit(nil); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	mustCommit(t, e, "")
	if st := e.Stats(); st.InFlightKeys != 0 {
		t.Fatalf("InFlightKeys = %d after the final commit", st.InFlightKeys)
	}
}

func TestCheckpointCopy(t *testing.T) {
	e := openT(t, Options{})
	cp := []byte("abc")
	mustObserve(t, e, "k", New)
	if err := e.Commit(cp); err != nil {
		t.Fatal(err)
	}
	cp[0] = 'X'
	got := e.Checkpoint()
	if !bytes.Equal(got, []byte("abc")) {
		t.Fatalf("Checkpoint aliased the caller's slice: %q", got)
	}
	got[0] = 'Y'
	if !bytes.Equal(e.Checkpoint(), []byte("abc")) {
		t.Fatal("Checkpoint returned the engine's own slice")
	}
}

// TestConcurrentEnginesKeepTheirCommits: two engines committing at once
// each keep every key they committed. A commit's store batch goes back to
// the shared pool only once the commit is done with it; a batch reused
// while still in use would wipe the other engine's keys.
func TestConcurrentEnginesKeepTheirCommits(t *testing.T) {
	engines := []*Engine{openT(t, Options{Shards: 2}), openT(t, Options{Shards: 2})}
	var wg sync.WaitGroup
	for w, e := range engines {
		wg.Add(1)
		go func(w int, e *Engine) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				key := []byte(fmt.Sprintf("%d-%d", w, i))
				if v, err := e.Observe(key); err != nil || v != New {
					t.Errorf("Observe: %v %v", v, err)
					return
				}
				if err := e.Commit([]byte(fmt.Sprint(i))); err != nil {
					t.Errorf("Commit: %v", err)
					return
				}
				if v, err := e.Observe(key); err != nil || v != Duplicate {
					t.Errorf("after commit: %v %v", v, err)
					return
				}
			}
		}(w, e)
	}
	wg.Wait()
}

// TestBarrier: CommitThrough commits exactly the keys observed New before
// the barrier, with the checkpoint; later keys stay in flight (and are New
// again after a restart), Forget works on either side, and a plain Commit
// still commits everything.
func TestBarrier(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		o := Options{Dir: t.TempDir(), Probabilistic: prob, Shards: 4}
		e := openT(t, o)
		mustObserveEach(t, e, New, "a", "b", "gone")
		b1 := e.Barrier()
		mustObserve(t, e, "c", New)
		mustObserve(t, e, "a", InFlight)
		if err := e.Forget([]byte("gone")); err != nil { // an older epoch
			t.Fatal(err)
		}
		b2 := e.Barrier()
		mustObserve(t, e, "d", New)
		if err := e.CommitThrough(b1, []byte("1")); err != nil {
			t.Fatal(err)
		}
		mustObserve(t, e, "a", Duplicate)
		mustObserve(t, e, "b", Duplicate)
		mustObserve(t, e, "c", InFlight)
		mustObserve(t, e, "d", InFlight)
		if st := e.Stats(); st.InFlightKeys != 2 {
			t.Fatalf("InFlightKeys = %d, want 2 (c, d)", st.InFlightKeys)
		}
		if err := e.CommitThrough(b2, []byte("2")); err != nil {
			t.Fatal(err)
		}
		mustObserve(t, e, "c", Duplicate)
		mustObserve(t, e, "d", InFlight)
		if err := e.Close(); err != nil { // drops d, as a crash would
			t.Fatal(err)
		}
		e = openT(t, o)
		if got := string(e.Checkpoint()); got != "2" {
			t.Fatalf("checkpoint %q", got)
		}
		mustObserveEach(t, e, Duplicate, "a", "b", "c")
		mustObserve(t, e, "d", New)
		mustObserve(t, e, "gone", New)
		mustCommit(t, e, "3") // everything
		mustObserve(t, e, "d", Duplicate)
	})
}

// TestBarrierPipelined commits batch i in the background while batch i+1
// is observed, as the dedup command does: every key of a committed batch is
// Duplicate, and at the end nothing is left in flight.
func TestBarrierPipelined(t *testing.T) {
	e := openT(t, Options{Shards: 4})
	errs := make(chan error, 1)
	var pending sync.WaitGroup
	const batches, per = 50, 200
	for i := 0; i < batches; i++ {
		for j := 0; j < per; j++ {
			mustObserve(t, e, fmt.Sprintf("%d-%d", i, j), New)
			if i > 0 && j%7 == 0 {
				// Repeats of the previous batch: in flight or committed.
				v, err := e.Observe([]byte(fmt.Sprintf("%d-%d", i-1, j)))
				if err != nil || (v != InFlight && v != Duplicate) {
					t.Fatalf("repeat: %v %v", v, err)
				}
			}
		}
		b := e.Barrier()
		pending.Wait() // one commit in the background at a time
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		pending.Add(1)
		go func(i int) {
			defer pending.Done()
			if err := e.CommitThrough(b, []byte(fmt.Sprint(i))); err != nil {
				errs <- err
			}
		}(i)
	}
	pending.Wait()
	if got := string(e.Checkpoint()); got != fmt.Sprint(batches-1) {
		t.Fatalf("checkpoint %q", got)
	}
	if st := e.Stats(); st.InFlightKeys != 0 || st.CommittedKeys != batches*per {
		t.Fatalf("in flight %d, committed %d", st.InFlightKeys, st.CommittedKeys)
	}
	for i := 0; i < batches; i++ {
		mustObserve(t, e, fmt.Sprintf("%d-0", i), Duplicate)
	}
}

// TestOpenRefusesFiltersLargerThanMemory: Open refuses, naming
// ExpectedRate, an ExpectedRate whose filters cannot fit in memory, rather
// than letting the first Observe exhaust it.
func TestOpenRefusesFiltersLargerThanMemory(t *testing.T) {
	_, err := Open(Options{ExpectedRate: 1e9, Window: time.Hour})
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "ExpectedRate") {
		t.Fatalf("Open with filters larger than memory: %v", err)
	}
}

// TestStatsAfterQuiet: Stats reports the generations live at the clock's
// now, even on shards nothing has touched since their generations expired.
func TestStatsAfterQuiet(t *testing.T) {
	clk := testclock.New(t0)
	e := openT(t, Options{Now: clk.Now, Window: time.Minute, Generations: 4, Shards: 4, ExpectedRate: 100})
	for i := 0; i < 100; i++ {
		mustObserve(t, e, fmt.Sprint(i), New)
	}
	mustCommit(t, e, "")
	if st := e.Stats(); st.Generations == 0 || st.FilterKeys != 100 {
		t.Fatalf("after the commit: %d generations, %d filter keys; want some, 100", st.Generations, st.FilterKeys)
	}
	clk.Advance(2 * time.Minute) // past W + W/N: everything expired
	if st := e.Stats(); st.Generations != 0 || st.FilterKeys != 0 || st.FilterBytes != 0 || len(st.GenerationStats) != 0 {
		t.Fatalf("after the window: %d generations, %d filter keys, %d bytes, %d per generation; want none",
			st.Generations, st.FilterKeys, st.FilterBytes, len(st.GenerationStats))
	}
}

// TestObserveBatchLarge drives ObserveBatch with large batches (every
// shard's group holds many keys), repeats within and across batches, and
// commits between them, against a plain model: a key's first sighting is
// New (or, probabilistic, a rare false-positive Duplicate, which may turn
// New once the young filter is rebuilt larger), later ones InFlight until
// a commit, Duplicate after.
func TestObserveBatchLarge(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		clk := testclock.New(t0)
		e := openT(t, Options{Dir: t.TempDir(), Probabilistic: prob, Now: clk.Now, Window: time.Hour, ExpectedRate: 1000})
		r := rand.New(rand.NewPCG(5, 6))
		const pool, batch = 20000, 1536
		state := make(map[int]Verdict) // New: in flight; Duplicate: committed
		falsePos := make(map[int]bool) // Duplicate at first sight, never committed
		keys := make([][]byte, batch)
		idx := make([]int, batch)
		out := make([]Verdict, batch)
		var fps int
		for round := 0; round < 30; round++ {
			for j := range keys {
				idx[j] = r.IntN(pool)
				keys[j] = fmt.Appendf(nil, "key-%d", idx[j])
			}
			if err := e.ObserveBatch(keys, out); err != nil {
				t.Fatal(err)
			}
			for j, k := range idx {
				want, seen := state[k]
				switch {
				case !seen && out[j] == New:
					state[k] = New
				case !seen && prob && out[j] == Duplicate:
					fps++
					state[k] = Duplicate // the engine holds it as seen
					falsePos[k] = true
				case seen && want == New && out[j] == InFlight:
				case seen && want == Duplicate && out[j] == Duplicate:
				case seen && falsePos[k] && out[j] == New:
					// A false positive of a filter since rebuilt larger
					// (the first generation grows with its keys): the
					// key is new to the engine after all.
					state[k] = New
					delete(falsePos, k)
				default:
					t.Fatalf("round %d: key %d (model: seen=%v %v) got %v", round, k, seen, want, out[j])
				}
			}
			if round%3 == 2 {
				mustCommit(t, e, fmt.Sprint(round))
				for k, v := range state {
					if v == New {
						state[k] = Duplicate
					}
				}
			}
		}
		if fps > pool/50 {
			t.Fatalf("%d false positives among %d keys, over 2%% at a 1%% target", fps, len(state))
		}
	})
}

// TestRecentCommitsAnswerDuplicates pins the exact-mode shortcut: a
// duplicate of a key of one of the last commits is answered from memory,
// an older one by the store, and either way it is a Duplicate.
func TestRecentCommitsAnswerDuplicates(t *testing.T) {
	// One shard: every commit holds keys of the shard of "a". A Dir:
	// without one the store is in memory and keeps no cache.
	e := openT(t, Options{Dir: t.TempDir(), Window: time.Minute, Shards: 1, Now: testclock.New(t0).Now})
	mustObserve(t, e, "a", New)
	mustCommit(t, e, "")
	mustObserve(t, e, "a", Duplicate)
	if n := e.Stats().StoreLookups; n != 0 {
		t.Fatalf("StoreLookups = %d after a duplicate of the last commit, want 0", n)
	}
	for i := range RecentSets {
		mustObserve(t, e, fmt.Sprint("b", i), New)
		mustCommit(t, e, "")
	}
	mustObserve(t, e, "a", Duplicate)
	if n := e.Stats().StoreLookups; n != 1 {
		t.Fatalf("StoreLookups = %d after a duplicate of an older commit, want 1", n)
	}
}
