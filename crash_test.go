package dedup_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

// TestCrashRecovery crashes the engine (a CrashClone of its in-memory file
// system, keeping a random share of unsynced data) at random moments,
// including while a Commit is running, and checks semantic 5 on the clone:
// every key of a Commit that returned is Duplicate, every key never
// committed is New, and Checkpoint is the last committed one (or the one of
// the commit that was racing the crash, in which case its keys are all
// there).
func TestCrashRecovery(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		for round := 0; round < 12; round++ {
			crashRound(t, prob, uint64(round))
		}
	})
}

func crashRound(t *testing.T, prob bool, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	fs := vfs.NewCrashableMem()
	clk := testclock.New(t0)
	o := Options{Dir: "/state", FS: fs, Probabilistic: prob, Now: clk.Now, Window: time.Hour, Shards: 4}
	e, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// committed[i] holds the keys of commit i (checkpoint "i").
	var committed [][]string
	commits := 3 + r.IntN(6)
	for c := 0; c < commits; c++ {
		var keys []string
		for k := 0; k < 50+r.IntN(200); k++ {
			key := fmt.Sprintf("c%d-k%d", c, k)
			mustObserve(t, e, key, New)
			keys = append(keys, key)
		}
		mustCommit(t, e, strconv.Itoa(c))
		committed = append(committed, keys)
		clk.Advance(time.Minute)
	}
	// Keys in flight at the crash, and a commit racing it.
	var racing []string
	for k := 0; k < 100; k++ {
		key := fmt.Sprintf("racing-%d", k)
		mustObserve(t, e, key, New)
		racing = append(racing, key)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = e.Commit([]byte(strconv.Itoa(commits)))
	}()
	time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: r.IntN(101), RNG: rand.New(rand.NewPCG(seed, 1))})
	wg.Wait()
	var never []string
	for k := 0; k < 50; k++ {
		key := fmt.Sprintf("never-%d", k)
		mustObserve(t, e, key, New)
		never = append(never, key)
	}

	o.FS = clone
	e2, err := Open(o)
	if err != nil {
		t.Fatalf("seed %d: reopen after crash: %v", seed, err)
	}
	defer e2.Close()
	cp := string(e2.Checkpoint())
	racingDurable := cp == strconv.Itoa(commits)
	if !racingDurable && cp != strconv.Itoa(commits-1) {
		t.Fatalf("seed %d: Checkpoint after crash = %q, want %d or %d", seed, cp, commits-1, commits)
	}
	for _, keys := range committed {
		for _, k := range keys {
			mustObserve(t, e2, k, Duplicate)
		}
	}
	want := New
	if racingDurable {
		want = Duplicate
	}
	for _, k := range racing {
		mustObserve(t, e2, k, want)
	}
	for _, k := range never {
		mustObserve(t, e2, k, New)
	}
}
