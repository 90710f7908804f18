package dedup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

// TestRenewExtendsTheLease: an owner that renews keeps its key in
// progress past the lease it claimed with, in this process and after a
// restart (the renewed deadline is durable, moved to the current
// generation when the first one would leave the window before it); a token
// that no longer owns the key cannot renew.
func TestRenewExtendsTheLease(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New(t0)
	opts := Options{Dir: dir, Now: clk.Now, Window: time.Hour}
	e := openT(t, opts)
	ctx := context.Background()
	c := mustBegin(t, e, "slow", "f", 10*time.Second, ClaimNew)
	for i := 0; i < 5; i++ {
		clk.Advance(8 * time.Second)
		if err := e.Renew(ctx, []byte("slow"), c.Token, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := mustBegin(t, e, "slow", "f", 10*time.Second, ClaimInProgress); got.LeaseLeft != 10*time.Second {
			t.Fatalf("LeaseLeft %v after a renewal, want 10s", got.LeaseLeft)
		}
	}
	// Renewed across the end of its first generation: the claim holds
	// through the new lease, after a restart too.
	clk.Set(c.Expires.Add(-5 * time.Second))
	if err := e.Renew(ctx, []byte("slow"), c.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openT(t, opts)
	clk.Advance(50 * time.Second)
	if got := mustBegin(t, e, "slow", "f", time.Minute, ClaimInProgress); got.LeaseLeft != 10*time.Second {
		t.Fatalf("after the restart, past the first generation: LeaseLeft %v, want 10s", got.LeaseLeft)
	}
	if err := e.Complete(ctx, []byte("slow"), c.Token, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if got := mustBegin(t, e, "slow", "f", time.Minute, ClaimCompleted); string(got.Result) != "done" {
		t.Fatalf("Result %q", got.Result)
	}
	if err := e.Renew(ctx, []byte("slow"), c.Token, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew of a completed key: %v, want ErrLeaseLost", err)
	}
	// Another owner after a lapsed lease: the first cannot renew.
	a := mustBegin(t, e, "k", "f", time.Second, ClaimNew)
	clk.Advance(2 * time.Second)
	mustBegin(t, e, "k", "f", time.Second, ClaimNew)
	if err := e.Renew(ctx, []byte("k"), a.Token, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew by an owner whose lease passed and was claimed again: %v, want ErrLeaseLost", err)
	}
	if err := e.Renew(ctx, []byte("k"), a.Token, 2*time.Hour); !errors.Is(err, ErrBadLease) {
		t.Fatalf("Renew with a lease over the window: %v, want ErrBadLease", err)
	}
}
