package dedup

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestConcurrentCommitsFurthestCheckpointWins holds a first commit inside
// its write (the commit gate held) while others queue behind it in a known
// order: the queued ones share the next write, through the furthest
// barrier among them, whose checkpoint is that of the furthest barrier
// that gave one (a plain Commit ranks after every Barrier taken before it
// began; of equal ranks the one queued last), whatever order they queue
// in.
func TestConcurrentCommitsFurthestCheckpointWins(t *testing.T) {
	type call struct {
		cp      string // "" commits a nil checkpoint
		barrier int    // 0: Commit; i: CommitThrough of the i-th barrier taken
	}
	for _, tc := range []struct {
		name  string
		calls []call
		want  string
	}{
		{"plain commits: the latest of three", []call{{"a", 0}, {"b", 0}, {"c", 0}}, "c"},
		{"nil does not count", []call{{"a", 0}, {"b", 0}, {"", 0}}, "b"},
		{"a later barrier queued first", []call{{"late", 2}, {"early", 1}}, "late"},
		{"an earlier barrier queued last", []call{{"early", 1}, {"late", 2}}, "late"},
		{"Commit begun after both barriers, then an earlier barrier", []call{{"all", 0}, {"early", 1}}, "all"},
		{"nil at the furthest barrier does not count", []call{{"mid", 1}, {"", 2}}, "mid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			observe := func(k string) {
				if v, err := e.Observe([]byte(k)); err != nil || v != New {
					t.Fatalf("Observe(%s) = %v, %v", k, v, err)
				}
			}
			// k0 before barrier 0, k1 before 1, k2 before 2.
			var barriers []Barrier
			for i := 0; i <= 2; i++ {
				observe("k" + string(rune('0'+i)))
				barriers = append(barriers, e.Barrier())
			}

			e.commitGate.Lock()
			errs := make(chan error, len(tc.calls)+1)
			go func() { errs <- e.CommitThrough(barriers[0], []byte("first")) }()
			// The first caller leads: it took its own request and waits for
			// the gate inside its write.
			waitUntil(func() bool { return e.cleader && len(e.cqueue) == 0 }, &e.cmu)
			for i, c := range tc.calls {
				var cp []byte
				if c.cp != "" {
					cp = []byte(c.cp)
				}
				go func() {
					if c.barrier == 0 {
						errs <- e.Commit(cp)
					} else {
						errs <- e.CommitThrough(barriers[c.barrier], cp)
					}
				}()
				waitUntil(func() bool { return len(e.cqueue) == i+1 }, &e.cmu)
			}
			e.commitGate.Unlock()
			for range len(tc.calls) + 1 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if got := string(e.Checkpoint()); got != tc.want {
				t.Fatalf("Checkpoint = %q, want %q", got, tc.want)
			}
			e = reopenT(t, e, Options{Dir: dir})
			if got := string(e.Checkpoint()); got != tc.want {
				t.Fatalf("after reopen, Checkpoint = %q, want %q", got, tc.want)
			}
			// Every case commits through barrier 2 at least.
			for _, k := range []string{"k0", "k1", "k2"} {
				if v, err := e.Observe([]byte(k)); err != nil || v != Duplicate {
					t.Fatalf("after reopen, Observe(%s) = %v, %v; want Duplicate", k, v, err)
				}
			}
		})
	}
}

// waitUntil yields until cond, read under mu, holds.
// reopenT closes e and opens its state again with o; the test closes the
// new engine when it ends.
func reopenT(t *testing.T, e *Engine, o Options) *Engine {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func waitUntil(cond func() bool, mu interface {
	Lock()
	Unlock()
}) {
	for {
		mu.Lock()
		ok := cond()
		mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// TestCheckpointNeverMovesBack commits through a later barrier, then
// through an earlier one: the second call's keys are durable already, and
// the checkpoint stays the later barrier's, in memory and after a reopen.
func TestCheckpointNeverMovesBack(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir, ExplicitDone: true})
	if err != nil {
		t.Fatal(err)
	}
	var barriers []Barrier
	for _, k := range []string{"a", "b"} {
		if v, err := e.Observe([]byte(k)); err != nil || v != New {
			t.Fatalf("Observe(%s) = %v, %v", k, v, err)
		}
		if err := e.Done([]byte(k)); err != nil {
			t.Fatal(err)
		}
		barriers = append(barriers, e.Barrier())
	}
	if err := e.CommitThrough(barriers[1], []byte("through b")); err != nil {
		t.Fatal(err)
	}
	if err := e.CommitThrough(barriers[0], []byte("through a")); err != nil {
		t.Fatal(err)
	}
	if got := string(e.Checkpoint()); got != "through b" {
		t.Fatalf("Checkpoint = %q after a commit through an earlier barrier, want %q", got, "through b")
	}
	// A plain Commit begun after both barriers moves it on.
	if err := e.Commit([]byte("all")); err != nil {
		t.Fatal(err)
	}
	if err := e.CommitThrough(barriers[1], []byte("through b again")); err != nil {
		t.Fatal(err)
	}
	if got := string(e.Checkpoint()); got != "all" {
		t.Fatalf("Checkpoint = %q, want %q", got, "all")
	}
	e = reopenT(t, e, Options{Dir: dir, ExplicitDone: true})
	if got := string(e.Checkpoint()); got != "all" {
		t.Fatalf("after reopen, Checkpoint = %q, want %q", got, "all")
	}
}

// TestCommitContextReturnsWhileTheWriteGoesOn holds the commit gate, so
// that a commit cannot write: CommitContext returns its context's error
// when that ends, the write then completes for the others (its keys and
// checkpoint become durable), and Close waits for it.
func TestCommitContextReturnsWhileTheWriteGoesOn(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := e.Observe([]byte("k")); err != nil || v != New {
		t.Fatalf("Observe = %v, %v", v, err)
	}
	e.commitGate.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.CommitContext(ctx, []byte("cp")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CommitContext with the gate held = %v, want DeadlineExceeded", err)
	}
	e.commitGate.Unlock()
	e = reopenT(t, e, Options{Dir: dir})
	if got := string(e.Checkpoint()); got != "cp" {
		t.Fatalf("Checkpoint after reopen = %q, want cp", got)
	}
	if v, err := e.Observe([]byte("k")); err != nil || v != Duplicate {
		t.Fatalf("Observe after reopen = %v, %v; want Duplicate", v, err)
	}
}
