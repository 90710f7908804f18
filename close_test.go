package dedup_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// TestCloseWhileBusy closes an engine while goroutines observe and commit
// and periodic snapshots and commits run; Close's final snapshot encodes
// the filters in its writers, without copying them first. The engine must
// close cleanly (-race watches the filters it encodes), reopen from that
// snapshot, and answer Duplicate for every key of a Commit that returned
// nil.
func TestCloseWhileBusy(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		dir := t.TempDir()
		o := Options{Dir: dir, Probabilistic: prob, ExpectedRate: 10_000, Window: 10 * time.Minute,
			SnapshotInterval: 5 * time.Millisecond, AutoCommit: 3 * time.Millisecond}
		e, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var committed []string
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					keys := make([][]byte, 64)
					for j := range keys {
						keys[j] = fmt.Appendf(nil, "w%d-%d-%d", w, i, j)
					}
					out := make([]Verdict, len(keys))
					err := e.ObserveBatch(keys, out)
					if err == nil {
						err = e.Commit(nil)
					}
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					// Only a New key is committed: in probabilistic mode a
					// first sighting may be a false positive (Duplicate),
					// which nothing remembers and a reopened engine may
					// well call New.
					mu.Lock()
					for j, k := range keys {
						if out[j] == New {
							committed = append(committed, string(k))
						}
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		if err := e.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wg.Wait()
		if len(committed) == 0 {
			t.Fatal("nothing was committed before Close")
		}
		e2, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		defer e2.Close()
		if got := e2.Stats().RestoredFrom; got != RestoredSnapshot {
			t.Fatalf("reopened from %q, want %q", got, RestoredSnapshot)
		}
		for _, k := range committed {
			if v, err := e2.Observe([]byte(k)); err != nil || v != Duplicate {
				t.Fatalf("committed key %q after reopen: %v, %v; want Duplicate", k, v, err)
			}
		}
	})
}
