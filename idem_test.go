package dedup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

func mustBegin(t testing.TB, e *Engine, key, fp string, lease time.Duration, want ClaimState) Claim {
	t.Helper()
	c, err := e.Begin(context.Background(), []byte(key), []byte(fp), lease)
	if err != nil {
		t.Fatalf("Begin(%q): %v", key, err)
	}
	if c.State != want {
		t.Fatalf("Begin(%q) = %v, want %v", key, c.State, want)
	}
	return c
}

func TestBeginConcurrentOneNew(t *testing.T) {
	e := openT(t, Options{})
	for round := 0; round < 20; round++ {
		key := []byte{'k', byte(round)}
		var news, progress atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := e.Begin(context.Background(), key, []byte("req"), time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				switch c.State {
				case ClaimNew:
					news.Add(1)
				case ClaimInProgress:
					if c.LeaseLeft <= 0 || c.LeaseLeft > time.Minute {
						t.Errorf("LeaseLeft %v", c.LeaseLeft)
					}
					progress.Add(1)
				default:
					t.Errorf("state %v", c.State)
				}
			}()
		}
		close(start)
		wg.Wait()
		if news.Load() != 1 || progress.Load() != 31 {
			t.Fatalf("round %d: %d New, %d InProgress; want 1 and 31", round, news.Load(), progress.Load())
		}
	}
}

func TestClaimLifecycle(t *testing.T) {
	clk := testclock.New(t0)
	e := openT(t, Options{Now: clk.Now, Window: time.Hour})
	ctx := context.Background()
	c := mustBegin(t, e, "order-1", "body-a", time.Minute, ClaimNew)
	if c.Expires.Before(t0.Add(time.Hour)) {
		t.Fatalf("Expires %v, before the window's end", c.Expires)
	}
	mustBegin(t, e, "order-1", "body-b", time.Minute, ClaimMismatch)
	if err := e.Complete(ctx, []byte("order-1"), Token{1}, []byte("x")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Complete with another token: %v, want ErrLeaseLost", err)
	}
	if err := e.Complete(ctx, []byte("order-1"), c.Token, []byte("charge ch_1")); err != nil {
		t.Fatal(err)
	}
	got := mustBegin(t, e, "order-1", "body-a", time.Minute, ClaimCompleted)
	if string(got.Result) != "charge ch_1" {
		t.Fatalf("Result %q", got.Result)
	}
	mustBegin(t, e, "order-1", "body-b", time.Minute, ClaimMismatch)
	if err := e.Release(ctx, []byte("order-1"), c.Token); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release after Complete: %v, want ErrLeaseLost", err)
	}

	// Release: the next Begin runs the work again.
	r := mustBegin(t, e, "order-2", "", time.Minute, ClaimNew)
	if err := e.Release(ctx, []byte("order-2"), r.Token); err != nil {
		t.Fatal(err)
	}
	mustBegin(t, e, "order-2", "", time.Minute, ClaimNew)

	// The result leaves with the window.
	clk.Advance(time.Hour + time.Hour/4 + time.Second)
	mustBegin(t, e, "order-1", "body-b", time.Minute, ClaimNew)
}

func TestLeaseExpiryLetsKeyRunAgain(t *testing.T) {
	clk := testclock.New(t0)
	e := openT(t, Options{Now: clk.Now})
	ctx := context.Background()
	first := mustBegin(t, e, "k", "f", 10*time.Second, ClaimNew)
	clk.Advance(9 * time.Second)
	c := mustBegin(t, e, "k", "f", 10*time.Second, ClaimInProgress)
	if c.LeaseLeft != time.Second {
		t.Fatalf("LeaseLeft %v, want 1s", c.LeaseLeft)
	}
	clk.Advance(time.Second)
	second := mustBegin(t, e, "k", "f", 10*time.Second, ClaimNew)
	if second.Token == first.Token {
		t.Fatal("the second claim has the first one's token")
	}
	if err := e.Complete(ctx, []byte("k"), first.Token, []byte("late")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Complete by the first owner: %v, want ErrLeaseLost", err)
	}
	if err := e.Complete(ctx, []byte("k"), second.Token, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if got := mustBegin(t, e, "k", "f", time.Second, ClaimCompleted); string(got.Result) != "done" {
		t.Fatalf("Result %q", got.Result)
	}
}

// TestAbandonedClaimsLeaveMemory: claims their callers never end (a
// worker that died without Complete or Release, on keys that never come
// back) leave the engine's memory once their lease passed and new claims
// come, instead of staying for good; a late Complete of one still stores
// its result (from the record on disk).
func TestAbandonedClaimsLeaveMemory(t *testing.T) {
	clk := testclock.New(t0)
	e := openT(t, Options{Now: clk.Now})
	ctx := context.Background()
	const n = 10_000 // past minSweep claims in every shard
	var first Claim
	for i := range n {
		c := mustBegin(t, e, fmt.Sprintf("abandoned-%d", i), "f", time.Second, ClaimNew)
		if i == 0 {
			first = c
		}
	}
	// A repeat waiting for an abandoned claim wakes when it is dropped.
	woke := make(chan error, 1)
	go func() {
		_, err := e.AwaitKey(ctx, []byte("abandoned-1"))
		woke <- err
	}()
	clk.Advance(2 * time.Second)
	for i := range n {
		mustBegin(t, e, fmt.Sprintf("live-%d", i), "f", time.Hour, ClaimNew)
	}
	if held := ClaimsHeld(e); held > n+n/2 {
		t.Fatalf("%d claims held in memory after %d abandoned and %d live", held, n, n)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitKey of a dropped claim still waits")
	}
	if err := e.Complete(ctx, []byte("abandoned-0"), first.Token, []byte("late")); err != nil {
		t.Fatalf("late Complete of an abandoned claim: %v", err)
	}
	if got := mustBegin(t, e, "abandoned-0", "f", time.Second, ClaimCompleted); string(got.Result) != "late" {
		t.Fatalf("Result %q", got.Result)
	}
}

func TestClaimsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	e, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	a := mustBegin(t, e, "a", "fa", time.Hour, ClaimNew)
	b := mustBegin(t, e, "b", "fb", time.Hour, ClaimNew)
	if err := e.Complete(ctx, []byte("b"), b.Token, []byte("result b")); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openT(t, Options{Dir: dir})
	mustBegin(t, e, "a", "fa", time.Hour, ClaimInProgress)
	if got := mustBegin(t, e, "b", "fb", time.Hour, ClaimCompleted); string(got.Result) != "result b" {
		t.Fatalf("Result %q", got.Result)
	}
	// The owner's token still ends its claim after the restart.
	if err := e.Complete(ctx, []byte("a"), a.Token, []byte("result a")); err != nil {
		t.Fatal(err)
	}
	if got := mustBegin(t, e, "a", "fa", time.Hour, ClaimCompleted); string(got.Result) != "result a" {
		t.Fatalf("Result %q", got.Result)
	}
}

// TestClaimHoldsThroughItsLease: a claim, fresh or taken again after a
// lapsed lease, stays in progress across a restart until its lease ends,
// even where the generation it was first claimed in leaves the window
// sooner; a lease longer than the window is refused.
func TestClaimHoldsThroughItsLease(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New(t0)
	opts := Options{Dir: dir, Now: clk.Now, Window: time.Hour}
	e := openT(t, opts)
	if _, err := e.Begin(context.Background(), []byte("k"), nil, time.Hour+time.Second); !errors.Is(err, ErrBadLease) {
		t.Fatalf("Begin with a lease over the window: %v, want ErrBadLease", err)
	}
	first := mustBegin(t, e, "again", "f", time.Minute, ClaimNew)
	// The first claim's lease passed (its owner crashed); the key is
	// claimed again 30s before its generation leaves the window.
	clk.Set(first.Expires.Add(-30 * time.Second))
	mustBegin(t, e, "again", "f", time.Minute, ClaimNew)
	mustBegin(t, e, "fresh", "f", time.Hour, ClaimNew)
	reopen := func() {
		t.Helper()
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openT(t, opts)
	}
	reopen()
	clk.Advance(40 * time.Second)
	mustBegin(t, e, "again", "f", time.Minute, ClaimInProgress)
	clk.Advance(time.Hour - 41*time.Second)
	mustBegin(t, e, "fresh", "f", time.Hour, ClaimInProgress)
	reopen()
	clk.Advance(2 * time.Second)
	mustBegin(t, e, "fresh", "f", time.Hour, ClaimNew)
}

func TestClaimErrors(t *testing.T) {
	ctx := context.Background()
	p := openT(t, Options{Probabilistic: true})
	if _, err := p.Begin(ctx, []byte("k"), nil, time.Second); !errors.Is(err, ErrNeedsExact) {
		t.Fatalf("Begin in probabilistic mode: %v, want ErrNeedsExact", err)
	}
	e := openT(t, Options{})
	if _, err := e.Begin(ctx, []byte("k"), nil, 0); !errors.Is(err, ErrBadLease) {
		t.Fatalf("Begin with lease 0: %v, want ErrBadLease", err)
	}
	if _, err := e.Begin(ctx, nil, nil, time.Second); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Begin with no key: %v, want ErrEmptyKey", err)
	}
	c := mustBegin(t, e, "k", "", time.Second, ClaimNew)
	err := e.Complete(ctx, []byte("k"), c.Token, make([]byte, MaxResultSize+1))
	if !errors.Is(err, ErrResultTooLarge) {
		t.Fatalf("Complete with a result over MaxResultSize: %v, want ErrResultTooLarge", err)
	}
	if err := e.Complete(ctx, []byte("k"), c.Token, make([]byte, MaxResultSize)); err != nil {
		t.Fatalf("Complete with a result of MaxResultSize: %v", err)
	}
	tok, err := ParseToken(c.Token.String())
	if err != nil || tok != c.Token {
		t.Fatalf("ParseToken(String) = %v, %v", tok, err)
	}
	if _, err := ParseToken("xyz"); !errors.Is(err, ErrBadToken) {
		t.Fatalf("ParseToken(xyz): %v", err)
	}
}

func TestAwaitKeyWakesOnComplete(t *testing.T) {
	e := openT(t, Options{})
	ctx := context.Background()
	if local, err := e.AwaitKey(ctx, []byte("none")); local || err != nil {
		t.Fatalf("AwaitKey of an absent key = %v, %v", local, err)
	}
	c := mustBegin(t, e, "k", "", time.Minute, ClaimNew)
	done := make(chan error)
	go func() {
		_, err := e.AwaitKey(ctx, []byte("k"))
		done <- err
	}()
	if err := e.Complete(ctx, []byte("k"), c.Token, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLookupDoesNotClaim(t *testing.T) {
	clk := testclock.New(t0)
	e := openT(t, Options{Now: clk.Now})
	ctx := context.Background()
	look := func(fp string, want ClaimState) Claim {
		t.Helper()
		c, err := e.Lookup(ctx, []byte("k"), []byte(fp))
		if err != nil || c.State != want {
			t.Fatalf("Lookup = %v, %v; want %v", c.State, err, want)
		}
		return c
	}
	look("f", ClaimAbsent)
	look("f", ClaimAbsent)
	c := mustBegin(t, e, "k", "f", time.Second, ClaimNew)
	look("f", ClaimInProgress)
	look("g", ClaimMismatch)
	clk.Advance(time.Second)
	look("f", ClaimAbsent) // the lease passed
	c = mustBegin(t, e, "k", "f", time.Second, ClaimNew)
	if err := e.Complete(ctx, []byte("k"), c.Token, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if got := look("f", ClaimCompleted); string(got.Result) != "r" {
		t.Fatalf("Result %q", got.Result)
	}
}

// TestClaimsTravelWithBackups: a backup and its restore carry the records,
// results and claims in progress alike.
func TestClaimsTravelWithBackups(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	e := openT(t, Options{Dir: root + "/live"})
	done := mustBegin(t, e, "done", "f", time.Hour, ClaimNew)
	if err := e.Complete(ctx, []byte("done"), done.Token, []byte("result")); err != nil {
		t.Fatal(err)
	}
	mustBegin(t, e, "running", "f", time.Hour, ClaimNew)
	if err := e.Backup(root + "/backup"); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreBackup(root+"/backup", root+"/restored"); err != nil {
		t.Fatal(err)
	}
	r := openT(t, Options{Dir: root + "/restored"})
	if got := mustBegin(t, r, "done", "f", time.Hour, ClaimCompleted); string(got.Result) != "result" {
		t.Fatalf("Result %q", got.Result)
	}
	mustBegin(t, r, "done", "other", time.Hour, ClaimMismatch)
	mustBegin(t, r, "running", "f", time.Hour, ClaimInProgress)
}

// TestSharedCommitsAreDurable: concurrent claims, results and releases
// share commits; each is durable when its call returns. A crash (a clone
// of the file system without its unsynced data) right after the calls
// keeps every result, every claim in progress, and no released key.
func TestSharedCommitsAreDurable(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	e, err := Open(Options{Dir: "/s", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	const n = 96
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("k%d", i))
			c, err := e.Begin(ctx, key, []byte("f"), time.Hour)
			if err != nil || c.State != ClaimNew {
				t.Errorf("Begin %s: %v %v", key, c.State, err)
				return
			}
			switch i % 3 {
			case 0:
				err = e.Complete(ctx, key, c.Token, bytes.Repeat([]byte{byte(i)}, i*100))
			case 1:
				err = e.Release(ctx, key, c.Token)
			}
			if err != nil {
				t.Errorf("end %s: %v", key, err)
			}
		}()
	}
	wg.Wait()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e.Close()
	r := openT(t, Options{Dir: "/s", FS: crashed})
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%d", i)
		switch i % 3 {
		case 0:
			c := mustBegin(t, r, key, "f", time.Hour, ClaimCompleted)
			if !bytes.Equal(c.Result, bytes.Repeat([]byte{byte(i)}, i*100)) {
				t.Fatalf("%s: result of %d bytes, want %d", key, len(c.Result), i*100)
			}
		case 1:
			mustBegin(t, r, key, "f", time.Hour, ClaimNew)
		case 2:
			mustBegin(t, r, key, "f", time.Hour, ClaimInProgress)
		}
	}
}

// TestSharedCommitFailureReachesEveryCaller: when the commit log fails,
// every concurrent Begin sharing the failed commit reports the error;
// none gets ClaimNew.
func TestSharedCommitFailureReachesEveryCaller(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) {
			// A slow failing sync: the Begins arriving meanwhile wait
			// for the next commit, which takes them all.
			time.Sleep(20 * time.Millisecond)
			return errorfs.ErrInjected
		}
		return nil
	})
	e, err := Open(Options{Dir: "/f", FS: errorfs.Wrap(vfs.NewMem(), inj)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	mustBegin(t, e, "before", "f", time.Hour, ClaimNew)
	armed.Store(true)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.Begin(ctx, []byte(fmt.Sprintf("k%d", i)), nil, time.Hour)
			if err == nil {
				t.Errorf("Begin k%d: %v with the log failing, want an error", i, c.State)
				return
			}
			failed.Add(1)
		}()
	}
	wg.Wait()
	if failed.Load() != 32 {
		t.Fatalf("%d of 32 Begins failed", failed.Load())
	}
}

// TestClaimsSurviveSnapshotAndCrash: a snapshot (which lets the commit log
// be truncated) keeps the records it covers, results and claims alike,
// and a crash after it loses none of them, nor a result completed after
// it.
func TestClaimsSurviveSnapshotAndCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	e, err := Open(Options{Dir: "/s", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	done := mustBegin(t, e, "done", "f", time.Hour, ClaimNew)
	if err := e.Complete(ctx, []byte("done"), done.Token, []byte("result")); err != nil {
		t.Fatal(err)
	}
	mustBegin(t, e, "running", "f", time.Hour, ClaimNew)
	released := mustBegin(t, e, "released", "f", time.Hour, ClaimNew)
	if err := e.Release(ctx, []byte("released"), released.Token); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		// Two snapshots: the second lets the log before the first go.
		if err := e.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	later := mustBegin(t, e, "later", "f", time.Hour, ClaimNew)
	if err := e.Complete(ctx, []byte("later"), later.Token, []byte("after")); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e.Close()
	r := openT(t, Options{Dir: "/s", FS: crashed})
	if c := mustBegin(t, r, "done", "f", time.Hour, ClaimCompleted); string(c.Result) != "result" {
		t.Fatalf("done: %q", c.Result)
	}
	if c := mustBegin(t, r, "later", "f", time.Hour, ClaimCompleted); string(c.Result) != "after" {
		t.Fatalf("later: %q", c.Result)
	}
	mustBegin(t, r, "running", "f", time.Hour, ClaimInProgress)
	mustBegin(t, r, "released", "f", time.Hour, ClaimNew)
}

// TestSharedCommitsOfLargeResults: results that together exceed what one
// shared commit takes are split over commits; every one is stored whole.
func TestSharedCommitsOfLargeResults(t *testing.T) {
	ctx := context.Background()
	e := openT(t, Options{Dir: t.TempDir()})
	const n = 6
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("big%d", i))
			c, err := e.Begin(ctx, key, nil, time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			if err := e.Complete(ctx, key, c.Token, bytes.Repeat([]byte{byte('a' + i)}, MaxResultSize)); err != nil {
				t.Errorf("Complete %s: %v", key, err)
			}
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		c := mustBegin(t, e, fmt.Sprintf("big%d", i), "", time.Hour, ClaimCompleted)
		if !bytes.Equal(c.Result, bytes.Repeat([]byte{byte('a' + i)}, MaxResultSize)) {
			t.Fatalf("big%d: result of %d bytes differs", i, len(c.Result))
		}
	}
}
