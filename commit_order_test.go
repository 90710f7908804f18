package dedup

import (
	"runtime"
	"testing"
)

// TestConcurrentCommitsLatestCheckpointWins holds a first commit inside its
// write (the commit gate held) while others queue behind it in a known
// order: the queued ones share the next write, whose checkpoint is that of
// the call queued last that gave one, through the furthest barrier among
// them, whatever order their barriers come in.
func TestConcurrentCommitsLatestCheckpointWins(t *testing.T) {
	type call struct {
		cp      string // "" commits a nil checkpoint
		barrier int    // 0: Commit; i: CommitThrough of the i-th barrier taken
	}
	for _, tc := range []struct {
		name  string
		calls []call
		want  string
	}{
		{"latest of three", []call{{"a", 0}, {"b", 0}, {"c", 0}}, "c"},
		{"nil does not count", []call{{"a", 0}, {"b", 0}, {"", 0}}, "b"},
		{"a later barrier queued first", []call{{"late", 2}, {"early", 1}}, "early"},
		{"Commit then an earlier barrier", []call{{"all", 0}, {"early", 1}}, "early"},
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
			observe("k0")
			barriers := []Barrier{0}
			for i := 1; i <= 2; i++ {
				barriers = append(barriers, e.Barrier())
				observe("k" + string(rune('0'+i)))
			}

			e.commitGate.Lock()
			errs := make(chan error, len(tc.calls)+1)
			go func() { errs <- e.Commit([]byte("first")) }()
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
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e, err = Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if got := string(e.Checkpoint()); got != tc.want {
				t.Fatalf("after reopen, Checkpoint = %q, want %q", got, tc.want)
			}
			// The first commit took every key observed; none is left.
			for _, k := range []string{"k0", "k1", "k2"} {
				if v, err := e.Observe([]byte(k)); err != nil || v != Duplicate {
					t.Fatalf("after reopen, Observe(%s) = %v, %v; want Duplicate", k, v, err)
				}
			}
		})
	}
}

// waitUntil yields until cond, read under mu, holds.
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
