package dedup_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

// TestPeekIsObserveWithoutMarking drives random Observe, Forget, Commit,
// Done and clock steps, and before every Observe asks Peek: its verdict
// must be the one Observe then returns, and two Peeks in a row must agree
// (Peek changed nothing), in both modes, with and without ExplicitDone,
// across generations expiring.
func TestPeekIsObserveWithoutMarking(t *testing.T) {
	for _, prob := range []bool{false, true} {
		for _, explicit := range []bool{false, true} {
			t.Run(fmt.Sprintf("probabilistic=%v/explicitDone=%v", prob, explicit), func(t *testing.T) {
				clk := testclock.New(t0)
				e := openT(t, Options{Probabilistic: prob, ExplicitDone: explicit, Window: time.Minute,
					ExpectedRate: 100, Shards: 4, Now: clk.Now})
				r := rand.New(rand.NewPCG(3, 4))
				var owned []string // observed New, not Forgotten or Done
				seen := map[Verdict]int{}
				for op := range 20000 {
					key := fmt.Sprint("k", r.IntN(3000))
					switch x := r.IntN(100); {
					case x < 2:
						mustCommit(t, e, "")
					case x < 3:
						clk.Advance(time.Duration(r.IntN(20)) * time.Second)
					case x < 8 && len(owned) > 0:
						i := r.IntN(len(owned))
						k := owned[i]
						owned = append(owned[:i], owned[i+1:]...)
						var err error
						if explicit && r.IntN(2) == 0 {
							err = e.Done([]byte(k))
						} else {
							err = e.Forget([]byte(k))
						}
						// Forget after a commit began is refused: the key stays.
						if err != nil && !errors.Is(err, ErrNotInFlight) {
							t.Fatalf("op %d: %v", op, err)
						}
					default:
						p1, err := e.Peek([]byte(key))
						if err != nil {
							t.Fatal(err)
						}
						p2, err := e.Peek([]byte(key))
						if err != nil {
							t.Fatal(err)
						}
						v, err := e.Observe([]byte(key))
						if err != nil {
							t.Fatal(err)
						}
						if p1 != v || p2 != v {
							t.Fatalf("op %d: Peek(%q) = %v then %v, then Observe = %v", op, key, p1, p2, v)
						}
						if v == New {
							owned = append(owned, key)
						}
						seen[v]++
					}
				}
				if seen[New] == 0 || seen[Duplicate] == 0 || seen[InFlight] == 0 {
					t.Fatalf("verdicts seen: %v", seen)
				}
			})
		}
	}
}

// TestPeekMarksNothing: keys only peeked at stay unknown (no key in
// flight, none counted observed), and every verdict Peek can give is
// given.
func TestPeekMarksNothing(t *testing.T) {
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprint("probabilistic=", prob), func(t *testing.T) {
			e := openT(t, Options{Probabilistic: prob, Window: time.Minute, Now: testclock.New(t0).Now})
			mustObserve(t, e, "committed", New)
			mustCommit(t, e, "")
			mustObserve(t, e, "inflight", New)
			for key, want := range map[string]Verdict{"committed": Duplicate, "inflight": InFlight, "fresh": New} {
				for range 3 {
					if v, err := e.Peek([]byte(key)); err != nil || v != want {
						t.Fatalf("Peek(%q) = %v, %v; want %v", key, v, err, want)
					}
				}
			}
			st := e.Stats()
			if st.Observed != 2 || st.New != 2 || st.Duplicate != 0 || st.InFlightVerdicts != 0 || st.InFlightKeys != 1 {
				t.Fatalf("Stats after Peeks: %+v", st)
			}
			mustObserve(t, e, "fresh", New)
			if err := e.Forget([]byte("fresh")); err != nil {
				t.Fatal(err)
			}
			mustObserve(t, e, "fresh", New)
		})
	}
}

// TestPeekErrors: Peek refuses what Observe refuses.
func TestPeekErrors(t *testing.T) {
	e, err := Open(Options{MaxKeySize: 8, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Peek(nil); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Peek(nil): %v, want ErrEmptyKey", err)
	}
	if _, err := e.Peek([]byte("123456789")); !errors.Is(err, ErrKeyTooLarge) {
		t.Fatalf("Peek of 9 bytes: %v, want ErrKeyTooLarge", err)
	}
	mustObserve(t, e, "a", New)
	if _, err := e.Observe([]byte("b")); !errors.Is(err, ErrTooManyInFlight) {
		t.Fatalf("Observe past MaxInFlight: %v", err)
	}
	if v, err := e.Peek([]byte("b")); err != nil || v != New {
		t.Fatalf("Peek past MaxInFlight = %v, %v; want New", v, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Peek([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Peek after Close: %v, want ErrClosed", err)
	}
}

// TestPeekConcurrent runs Peek against Observe, Forget and Commit on the
// same keys (run it with -race): keys committed before it starts always
// peek Duplicate, keys nobody observes always peek New and are New to
// Observe after, and the keys the workers observe get the verdicts their
// own history calls for, whatever the Peeks of them meanwhile: a key a
// worker does not hold is never InFlight.
func TestPeekConcurrent(t *testing.T) {
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprint("probabilistic=", prob), func(t *testing.T) {
			// A small filter target keeps false positives off the keys.
			e := openT(t, Options{Probabilistic: prob, Window: time.Hour, FalsePositiveRate: 1e-6, Now: testclock.New(t0).Now})
			const old = 2000
			for i := range old {
				mustObserve(t, e, fmt.Sprint("old", i), New)
			}
			mustCommit(t, e, "")
			errs := make(chan error, 8)
			fail := func(err error) {
				select {
				case errs <- err:
				default:
				}
			}
			// Workers: each alone observes its keys "w<id>-<n>", forgets
			// some it owns, and commits now and then (every key in flight,
			// the other worker's too).
			const (
				unknown = iota
				owned
				committing // taken by a commit that may still be writing
				committed
			)
			stop := make(chan struct{})
			var workers sync.WaitGroup
			for w := range 2 {
				workers.Add(1)
				go func() {
					defer workers.Done()
					r := rand.New(rand.NewPCG(uint64(w), 9))
					state := make([]int, 300)
					for {
						select {
						case <-stop:
							return
						default:
						}
						i := r.IntN(len(state))
						key := []byte(fmt.Sprintf("w%d-%d", w, i))
						v, err := e.Observe(key)
						if err != nil {
							fail(err)
							return
						}
						ok := false
						switch state[i] {
						case unknown:
							ok = v == New
						case owned:
							// A commit may have taken it.
							ok = v == InFlight || v == Duplicate
						case committing:
							// Forget said ErrNotInFlight: a commit has taken the
							// key, and until its write ends the key is InFlight.
							ok = v == InFlight || v == Duplicate
						case committed:
							ok = v == Duplicate
						}
						if !ok {
							fail(fmt.Errorf("worker %d: Observe(%s) = %v in state %d", w, key, v, state[i]))
							return
						}
						switch v {
						case New:
							state[i] = owned
						case Duplicate:
							state[i] = committed
						}
						switch {
						case state[i] == owned && r.IntN(3) == 0:
							switch err := e.Forget(key); {
							case err == nil:
								state[i] = unknown
							case errors.Is(err, ErrNotInFlight):
								state[i] = committing // a commit took it
							default:
								fail(err)
								return
							}
						case r.IntN(40) == 0:
							if err := e.Commit(nil); err != nil {
								fail(err)
								return
							}
						}
					}
				}()
			}
			const peekers = 2
			var peeks sync.WaitGroup
			for p := range peekers {
				peeks.Add(1)
				go func() {
					defer peeks.Done()
					r := rand.New(rand.NewPCG(uint64(p), 10))
					for i := range 20000 {
						var key string
						var want Verdict
						switch r.IntN(3) {
						case 0:
							key, want = fmt.Sprint("old", r.IntN(old)), Duplicate
						case 1:
							key, want = fmt.Sprint("never", p, "-", i), New
						default:
							key = fmt.Sprintf("w%d-%d", r.IntN(2), r.IntN(300))
						}
						v, err := e.Peek([]byte(key))
						if err != nil {
							fail(err)
							return
						}
						if want != 0 && v != want {
							fail(fmt.Errorf("Peek(%q) = %v, want %v", key, v, want))
							return
						}
					}
				}()
			}
			peeks.Wait()
			close(stop)
			workers.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for p := range peekers {
				for _, i := range []int{0, 1, 19999} {
					mustObserve(t, e, fmt.Sprint("never", p, "-", i), New)
				}
			}
		})
	}
}
