package dedup_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// TestExplicitDoneForgetAfterConcurrentCommit: a key observed New, a
// Commit by another goroutine, then the processing fails. Under
// ExplicitDone the Commit leaves the key in flight, Forget succeeds and
// after a restart the key is New.
func TestExplicitDoneForgetAfterConcurrentCommit(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		o := dedup.Options{Dir: t.TempDir(), ExplicitDone: true, Probabilistic: prob}
		e := openT(t, o)
		mustObserve(t, e, "A", dedup.New)
		done := make(chan error)
		go func() { done <- e.Commit([]byte("cp")) }()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mustObserve(t, e, "A", dedup.InFlight) // still owned
		if err := e.Forget([]byte("A")); err != nil {
			t.Fatalf("Forget after a concurrent Commit: %v", err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openT(t, o)
		if cp := string(e.Checkpoint()); cp != "cp" {
			t.Fatalf("Checkpoint = %q", cp)
		}
		mustObserve(t, e, "A", dedup.New)
	})
}

// TestExplicitDoneCommitsOnlyDone: Commit makes Done keys durable; the
// others stay in flight across commits (InFlight to other observers,
// forgettable) and are lost by a restart, as uncommitted keys are. A Done
// key answers Duplicate before its commit.
func TestExplicitDoneCommitsOnlyDone(t *testing.T) {
	o := dedup.Options{Dir: t.TempDir(), ExplicitDone: true}
	e := openT(t, o)
	mustObserveEach(t, e, dedup.New, "A", "B", "C")
	mustDone(t, e, "A")
	mustObserve(t, e, "A", dedup.Duplicate) // done, not committed yet
	mustCommit(t, e, "1")
	mustObserve(t, e, "A", dedup.Duplicate)
	mustObserve(t, e, "B", dedup.InFlight)
	mustObserve(t, e, "C", dedup.InFlight)
	if st := e.Stats(); st.InFlightKeys != 2 || st.NotDoneKeys != 2 {
		t.Fatalf("InFlightKeys %d, NotDoneKeys %d after committing 1 of 3, want 2 and 2", st.InFlightKeys, st.NotDoneKeys)
	}
	mustCommit(t, e, "2") // nothing Done: B, C stay
	mustDone(t, e, "B")
	if err := e.Forget([]byte("C")); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, e, "3")
	mustObserve(t, e, "C", dedup.New) // forgotten: a new owner
	mustObserve(t, e, "D", dedup.New)
	if err := e.Close(); err != nil { // drops C and D, as a crash would
		t.Fatal(err)
	}
	e = openT(t, o)
	if cp := string(e.Checkpoint()); cp != "3" {
		t.Fatalf("Checkpoint = %q, want 3", cp)
	}
	mustObserve(t, e, "A", dedup.Duplicate)
	mustObserve(t, e, "B", dedup.Duplicate)
	mustObserve(t, e, "C", dedup.New)
	mustObserve(t, e, "D", dedup.New)
}

// TestExplicitDoneCommitThrough: CommitThrough(b) makes durable the keys
// Done before Barrier returned b; keys Done after stay in flight.
func TestExplicitDoneCommitThrough(t *testing.T) {
	o := dedup.Options{Dir: t.TempDir(), ExplicitDone: true}
	e := openT(t, o)
	mustObserveEach(t, e, dedup.New, "A", "B", "C")
	mustDone(t, e, "A")
	b := e.Barrier()
	mustDone(t, e, "B")
	if err := e.CommitThrough(b, []byte("b")); err != nil {
		t.Fatal(err)
	}
	mustObserve(t, e, "A", dedup.Duplicate)
	mustObserve(t, e, "B", dedup.Duplicate) // Done, not committed
	mustObserve(t, e, "C", dedup.InFlight)
	if err := e.Forget([]byte("B")); !errors.Is(err, dedup.ErrAlreadyDone) {
		t.Fatalf("Forget of a Done key past the barrier = %v, want ErrAlreadyDone", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openT(t, o)
	mustObserve(t, e, "A", dedup.Duplicate)
	mustObserve(t, e, "B", dedup.New)
	mustObserve(t, e, "C", dedup.New)
}

// TestExplicitDoneErrors: Done and Forget of keys in each state.
func TestExplicitDoneErrors(t *testing.T) {
	e := openT(t, dedup.Options{ExplicitDone: true})
	wantErr(t, "Done of a key never observed", e.Done([]byte("X")), dedup.ErrNotInFlight)
	wantErr(t, "Done of an empty key", e.Done(nil), dedup.ErrEmptyKey)
	wantErr(t, "Done of a key over MaxKeySize", e.Done(make([]byte, 5000)), dedup.ErrKeyTooLarge)
	mustObserve(t, e, "A", dedup.New)
	mustDone(t, e, "A")
	wantErr(t, "Done twice", e.Done([]byte("A")), dedup.ErrAlreadyDone)
	wantErr(t, "Forget after Done", e.Forget([]byte("A")), dedup.ErrAlreadyDone)
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Forget after Done and Commit", e.Forget([]byte("A")), dedup.ErrNotInFlight)
	wantErr(t, "Done after Commit", e.Done([]byte("A")), dedup.ErrNotInFlight)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Done after Close", e.Done([]byte("A")), dedup.ErrClosed)
	wantErr(t, "DoneBatch after Close", e.DoneBatch([][]byte{[]byte("A")}), dedup.ErrClosed)
}

// TestDoneWithoutExplicitDone: the sequential pattern is unchanged (Commit
// makes every key observed New durable) and Done tells the caller that it
// needs ExplicitDone.
func TestDoneWithoutExplicitDone(t *testing.T) {
	e := openT(t, dedup.Options{})
	mustObserve(t, e, "A", dedup.New)
	wantErr(t, "Done without ExplicitDone", e.Done([]byte("A")), dedup.ErrNoExplicitDone)
	wantErr(t, "DoneBatch without ExplicitDone", e.DoneBatch([][]byte{[]byte("A")}), dedup.ErrNoExplicitDone)
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	mustObserve(t, e, "A", dedup.Duplicate)
}

// TestDoneBatch: every key of the batch that is in flight is Done; the
// error names the first that was not.
func TestDoneBatch(t *testing.T) {
	o := dedup.Options{Dir: t.TempDir(), ExplicitDone: true}
	e := openT(t, o)
	mustObserveEach(t, e, dedup.New, "A", "B", "C", "D")
	if err := e.DoneBatch([][]byte{[]byte("A"), []byte("B")}); err != nil {
		t.Fatal(err)
	}
	err := e.DoneBatch([][]byte{[]byte("C"), []byte("X"), []byte("A")})
	if !errors.Is(err, dedup.ErrNotInFlight) || !errors.Is(err, dedup.ErrAlreadyDone) || !strings.Contains(err.Error(), "entry 1") {
		t.Fatalf("DoneBatch with a key not in flight and one done = %v; want both named, from entry 1", err)
	}
	wantErr(t, "DoneBatch with a nil key", e.DoneBatch([][]byte{[]byte("D"), nil}), dedup.ErrEmptyKey)
	wantErr(t, "Forget of D after the refused batch", e.Forget([]byte("D")), nil) // the batch was refused whole
	mustCommit(t, e, "cp")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openT(t, o)
	mustObserveEach(t, e, dedup.Duplicate, "A", "B", "C")
	mustObserve(t, e, "D", dedup.New)
}

// TestExplicitDoneMaxInFlight: keys not yet Done hold their MaxInFlight
// slot across commits; Done and a Commit free it.
func TestExplicitDoneMaxInFlight(t *testing.T) {
	e := openT(t, dedup.Options{ExplicitDone: true, MaxInFlight: 2})
	mustObserve(t, e, "A", dedup.New)
	mustObserve(t, e, "B", dedup.New)
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	_, err := e.Observe([]byte("C"))
	wantErr(t, "Observe past MaxInFlight, nothing Done", err, dedup.ErrTooManyInFlight)
	if !strings.Contains(err.Error(), "Done") {
		t.Fatalf("the error should say that keys must be Done: %v", err)
	}
	mustDone(t, e, "A")
	_, err = e.Observe([]byte("C"))
	wantErr(t, "Observe past MaxInFlight, A Done but not committed", err, dedup.ErrTooManyInFlight)
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	mustObserve(t, e, "C", dedup.New)
	if err := e.Forget([]byte("B")); err != nil {
		t.Fatal(err)
	}
	mustObserve(t, e, "D", dedup.New)
}

// TestExplicitDoneConcurrent runs workers that share keys, Forget some and
// Done the rest, with commits running meanwhile: one owner per key at a
// time, every key ends Duplicate, nothing is left in flight after a last
// commit.
func TestExplicitDoneConcurrent(t *testing.T) {
	e := openT(t, dedup.Options{ExplicitDone: true, Shards: 4})
	const keys, workers = 2000, 6
	var owner [keys]sync.Mutex // held by the key's owner: TryLock fails for a second one
	var dones [keys]atomic.Int32
	var wg sync.WaitGroup
	stop := make(chan struct{})
	commitErr := make(chan error, 1)
	go func() {
		defer close(commitErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.Commit(nil); err != nil {
				commitErr <- err
				return
			}
		}
	}()
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			// Each worker goes through every key until it is Duplicate:
			// an InFlight key goes to the back of the queue (its owner may
			// still Forget it), a forgotten one is asked again at once.
			queue := r.Perm(keys)
			for len(queue) > 0 {
				i := queue[0]
				queue = queue[1:]
				key := fmt.Appendf(nil, "k%d", i)
				v, err := e.Observe(key)
				switch {
				case err != nil:
					errs <- err
					return
				case v == dedup.Duplicate:
					continue
				case v == dedup.InFlight:
					queue = append(queue, i)
					runtime.Gosched()
					continue
				}
				if !owner[i].TryLock() {
					errs <- fmt.Errorf("key %s: two owners at once", key)
					return
				}
				runtime.Gosched() // hold the key a while: a second owner would find it held
				owner[i].Unlock()
				if r.IntN(10) == 0 {
					if err := e.Forget(key); err != nil {
						errs <- fmt.Errorf("forget %s: %w", key, err)
						return
					}
					queue = append([]int{i}, queue...)
					continue
				}
				if err := e.Done(key); err != nil {
					errs <- fmt.Errorf("done %s: %w", key, err)
					return
				}
				dones[i].Add(1)
				queue = append(queue, i) // Duplicate once committed
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-commitErr; err != nil {
		t.Fatal(err)
	}
	// A Done key answers Duplicate before its commit, so workers may
	// finish while the last ones wait for one.
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if n := e.Stats().InFlightKeys; n != 0 {
		t.Fatalf("InFlightKeys = %d after every worker finished and a last commit", n)
	}
	for i := range dones {
		if n := dones[i].Load(); n != 1 {
			t.Fatalf("key k%d was Done %d times, want once", i, n)
		}
	}
}

// TestCloseReportsInFlight: Close drops keys in flight, as a crash would,
// and reports how many in Stats.DroppedAtClose and in the log; it still
// returns nil, since dropping them is what a caller that closes without
// committing asks for.
func TestCloseReportsInFlight(t *testing.T) {
	var logged logLines
	o := dedup.Options{Dir: t.TempDir(), Logf: logged.logf}
	e := openT(t, o)
	mustObserveEach(t, e, dedup.New, "A", "B", "C")
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	mustObserve(t, e, "D", dedup.New)
	mustObserve(t, e, "E", dedup.New)
	if err := e.Close(); err != nil {
		t.Fatalf("Close with keys in flight = %v, want nil", err)
	}
	if n := e.Stats().DroppedAtClose; n != 2 {
		t.Fatalf("DroppedAtClose = %d, want 2", n)
	}
	if len(logged.containing("2 keys in flight")) == 0 {
		t.Fatalf("Close logged %q, want the 2 keys in flight named", logged.all())
	}

	// Under AutoCommit Close commits them: none dropped. Under ExplicitDone
	// it commits the Done ones and drops the others.
	o = dedup.Options{AutoCommit: time.Hour, ExplicitDone: true}
	e = openT(t, o)
	mustObserve(t, e, "A", dedup.New)
	mustObserve(t, e, "B", dedup.New)
	mustDone(t, e, "A")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.DroppedAtClose != 1 || st.CommittedKeys != 1 {
		t.Fatalf("DroppedAtClose %d, CommittedKeys %d; want 1 and 1", st.DroppedAtClose, st.CommittedKeys)
	}
}

// TestDoneKeyIsDuplicateBeforeCommit: under ExplicitDone a key answers
// InFlight while its owner works on it and Duplicate from Done on, to
// Observe, ObserveBatch and Peek alike, before any commit; such a
// Duplicate counts in Stats.Duplicate and nowhere in the observed
// false-positive samples. Without a commit a restart forgets the key, as
// it forgets every uncommitted one.
func TestDoneKeyIsDuplicateBeforeCommit(t *testing.T) {
	o := dedup.Options{Dir: t.TempDir(), ExplicitDone: true}
	e := openT(t, o)
	mustObserve(t, e, "A", dedup.New)
	mustObserve(t, e, "A", dedup.InFlight)
	if v, err := e.Peek([]byte("A")); err != nil || v != dedup.InFlight {
		t.Fatalf("Peek(A) before Done = %v, %v; want InFlight", v, err)
	}
	mustDone(t, e, "A")
	mustObserve(t, e, "A", dedup.Duplicate)
	if v, err := e.Peek([]byte("A")); err != nil || v != dedup.Duplicate {
		t.Fatalf("Peek(A) after Done = %v, %v; want Duplicate", v, err)
	}
	out := make([]dedup.Verdict, 3)
	if err := e.ObserveBatch([][]byte{[]byte("A"), []byte("B"), []byte("B")}, out); err != nil {
		t.Fatal(err)
	}
	if want := []dedup.Verdict{dedup.Duplicate, dedup.New, dedup.InFlight}; !slices.Equal(out, want) {
		t.Fatalf("ObserveBatch(A, B, B) = %v, want %v", out, want)
	}
	if st := e.Stats(); st.Duplicate != 2 || st.InFlightKeys != 2 || st.NotDoneKeys != 1 {
		t.Fatalf("Stats: Duplicate %d, InFlightKeys %d, NotDoneKeys %d; want 2, 2, 1", st.Duplicate, st.InFlightKeys, st.NotDoneKeys)
	}
	if err := e.Close(); err != nil { // no commit: a crash
		t.Fatal(err)
	}
	e = openT(t, o)
	defer e.Close()
	mustObserve(t, e, "A", dedup.New)
	mustObserve(t, e, "B", dedup.New)
}
