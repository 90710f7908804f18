package dedup_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// poolEvents is an input of n events, about 10% repeats, half of them
// within the 20 events before: the stream of the library trial.
func poolEvents(n int) []string {
	return keyStream{seed1: uint64(n), seed2: 27, near: 5, span: 20, far: 5, format: "id-%07d"}.keys(n)
}

// TestPoolExactlyOnce runs a pool whose Process fails now and then, with
// commits by count only (no timer), and checks that every distinct key is
// output once, in one piece, that the checkpoint after Close covers every
// event, and that a reopened engine answers every key Duplicate.
func TestPoolExactlyOnce(t *testing.T) {
	opts := dedup.Options{Dir: t.TempDir(), ExplicitDone: true}
	e, err := dedup.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	events := poolEvents(20_000)
	var output []string // guarded by the pool's ordering lock
	var failures, commits atomic.Int64
	var lastCommitted atomic.Value
	p, err := dedup.NewPool(e, dedup.PoolOptions[string]{
		Workers: 8,
		Key:     func(k string) []byte { return []byte(k) },
		Process: func(ctx context.Context, k string) error {
			if rand.IntN(50) == 0 {
				failures.Add(1)
				return errors.New("flaky")
			}
			return nil
		},
		Output: func(k string) error { output = append(output, k); return nil },
		Checkpoint: func(resume int64) ([]byte, error) {
			return fmt.Appendf(nil, "%d %d", resume, len(output)), nil
		},
		Committed:      func(cp []byte) { commits.Add(1); lastCommitted.Store(string(cp)) },
		CommitEvery:    1000,
		CommitInterval: time.Hour,
		Attempts:       50,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, k := range events {
		if err := p.Submit(ctx, k, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(ctx, "late", 0); !errors.Is(err, dedup.ErrPoolClosed) {
		t.Fatalf("Submit after Close = %v, want ErrPoolClosed", err)
	}
	want := slices.Compact(slices.Sorted(slices.Values(events)))
	got := slices.Sorted(slices.Values(output))
	if !slices.Equal(got, want) {
		t.Fatalf("output holds %d keys, want each of %d distinct keys once", len(got), len(want))
	}
	cp := fmt.Sprintf("%d %d", len(events), len(want))
	if got := string(e.Checkpoint()); got != cp {
		t.Fatalf("Checkpoint = %q, want %q", got, cp)
	}
	if got, _ := lastCommitted.Load().(string); got != cp {
		t.Fatalf("last Committed call had %q, want %q", got, cp)
	}
	t.Logf("%d events, %d distinct, %d Process failures retried, %d commits", len(events), len(want), failures.Load(), commits.Load())
	e = reopen(t, e, opts)
	for _, k := range want {
		if v, err := e.Observe([]byte(k)); err != nil || v != dedup.Duplicate {
			t.Fatalf("after reopen, Observe(%s) = %v, %v; want Duplicate", k, v, err)
		}
	}
}

// TestPoolWaitsForOwnerOutside: an event whose key is in flight with an
// owner outside the pool is tried again, never dropped: once the owner
// forgets the key, the pool processes it.
func TestPoolWaitsForOwnerOutside(t *testing.T) {
	e, err := dedup.Open(dedup.Options{ExplicitDone: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if v, err := e.Observe([]byte("held")); err != nil || v != dedup.New {
		t.Fatalf("Observe = %v, %v", v, err)
	}
	var processed atomic.Int64
	p, err := dedup.NewPool(e, dedup.PoolOptions[string]{
		Key:     func(k string) []byte { return []byte(k) },
		Process: func(context.Context, string) error { processed.Add(1); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Submit(ctx, "held", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n := processed.Load(); n != 0 {
		t.Fatalf("processed %d events while the key was owned outside the pool", n)
	}
	if err := e.Forget([]byte("held")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := processed.Load(); n != 1 {
		t.Fatalf("processed %d events, want 1", n)
	}
	if got := string(e.Checkpoint()); got != "1" {
		t.Fatalf("Checkpoint = %q, want 1", got)
	}
}

// TestPoolErrors: the options NewPool refuses, an event whose Process
// keeps failing stops the pool with its error, and a Close whose context
// ends returns that context's error with the complete events committed.
func TestPoolErrors(t *testing.T) {
	plain, err := dedup.Open(dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	key := func(k string) []byte { return []byte(k) }
	nop := func(context.Context, string) error { return nil }
	if _, err := dedup.NewPool(plain, dedup.PoolOptions[string]{Key: key, Process: nop}); !errors.Is(err, dedup.ErrNoExplicitDone) {
		t.Fatalf("NewPool without ExplicitDone = %v, want ErrNoExplicitDone", err)
	}
	if _, err := dedup.NewPool(&dedup.Engine{}, dedup.PoolOptions[string]{Key: key, Process: nop}); !errors.Is(err, dedup.ErrNotOpen) {
		t.Fatalf("NewPool on a zero Engine = %v, want ErrNotOpen", err)
	}
	e, err := dedup.Open(dedup.Options{ExplicitDone: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = dedup.NewPool(e, dedup.PoolOptions[string]{Workers: -1})
	for _, field := range []string{"Key", "Process", "Workers"} {
		if !errors.Is(err, dedup.ErrInvalidOptions) || !strings.Contains(err.Error(), "PoolOptions."+field) {
			t.Fatalf("NewPool with bad options = %v, want ErrInvalidOptions naming %s", err, field)
		}
	}

	boom := errors.New("boom")
	p, err := dedup.NewPool(e, dedup.PoolOptions[string]{Key: key, Attempts: 2,
		Process: func(_ context.Context, k string) error {
			if k == "bad" {
				return boom
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, k := range []string{"a", "bad", "b"} {
		if err := p.Submit(ctx, k, int64(i+1)); err != nil && !errors.Is(err, boom) {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); !errors.Is(err, boom) {
		t.Fatalf("Close after Process kept failing = %v, want boom", err)
	}
	if v, err := e.Observe([]byte("bad")); err != nil || v != dedup.New {
		t.Fatalf("the failing key after the pool stopped: %v, %v; want New (forgotten)", v, err)
	}
	if err := e.Forget([]byte("bad")); err != nil {
		t.Fatal(err)
	}

	// Close with a context that ends while an event is stuck in Process.
	release := make(chan struct{})
	p, err = dedup.NewPool(e, dedup.PoolOptions[string]{Key: key,
		Process: func(ctx context.Context, k string) error {
			if k == "stuck" {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-release:
				}
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(ctx, "first", 10); err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(ctx, "stuck", 11); err != nil {
		t.Fatal(err)
	}
	for { // until "first" is Done: complete, below the watermark
		if v, _ := e.Peek([]byte("first")); v == dedup.Duplicate {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a context that ends = %v, want DeadlineExceeded", err)
	}
	close(release)
	if err := e.CommitContext(ctx, nil); err != nil { // waits for the pool's last write, if any
		t.Fatal(err)
	}
	if got := string(e.Checkpoint()); got != "10" {
		t.Fatalf("Checkpoint after an early Close = %q, want 10 (the complete event)", got)
	}
	if v, err := e.Observe([]byte("stuck")); err != nil || v != dedup.New {
		t.Fatalf("the stuck key after an early Close: %v, %v; want New (forgotten)", v, err)
	}
}

// BenchmarkPoolVersusSequential processes 200,000 events (10% repeats)
// into an output file with a commit every 5,000 events, on a state
// directory: "sequential" is the one-loop consumer of the README (Observe,
// write, every 5,000 events Flush, Sync and Commit), "pool" is dedup.Pool
// with 8 workers and the same output and cadence. Each op is one whole
// run; compare the two ns/op of one run (-count alternates them).
func BenchmarkPoolVersusSequential(b *testing.B) {
	const n, every = 200_000, 5000
	events := poolEvents(n)
	run := func(b *testing.B, explicitDone bool, body func(e *dedup.Engine, out *os.File) error) {
		b.ReportAllocs()
		for range b.N {
			dir := b.TempDir()
			e, err := dedup.Open(dedup.Options{Dir: filepath.Join(dir, "state"), ExplicitDone: explicitDone, Window: 24 * time.Hour, ExpectedRate: 5000})
			if err != nil {
				b.Fatal(err)
			}
			out, err := os.Create(filepath.Join(dir, "out"))
			if err != nil {
				b.Fatal(err)
			}
			if err := body(e, out); err != nil {
				b.Fatal(err)
			}
			if err := errors.Join(out.Close(), e.Close()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("sequential", func(b *testing.B) {
		run(b, false, func(e *dedup.Engine, out *os.File) error {
			w := bufio.NewWriter(out)
			var written int64
			for i, k := range events {
				v, err := e.Observe([]byte(k))
				if err != nil {
					return err
				}
				if v == dedup.New {
					m, _ := w.WriteString(k + "\n")
					written += int64(m)
				}
				if (i+1)%every == 0 || i == n-1 {
					if err := w.Flush(); err != nil {
						return err
					}
					if err := out.Sync(); err != nil {
						return err
					}
					if err := e.Commit(fmt.Appendf(nil, "%d %d", i+1, written)); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	b.Run("pool", func(b *testing.B) {
		run(b, true, func(e *dedup.Engine, out *os.File) error {
			o := newLineOutput(out, 0)
			p, err := dedup.NewPool(e, dedup.PoolOptions[string]{
				Workers:     8,
				Key:         func(k string) []byte { return []byte(k) },
				Process:     func(context.Context, string) error { return nil },
				Output:      o.output,
				Checkpoint:  o.checkpoint,
				Sync:        out.Sync,
				CommitEvery: every,
			})
			if err != nil {
				return err
			}
			ctx := context.Background()
			for i, k := range events {
				if err := p.Submit(ctx, k, int64(i+1)); err != nil {
					return err
				}
			}
			return p.Close(ctx)
		})
	})
}
