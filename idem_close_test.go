package dedup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestIdemCallsRacingCloseGetErrClosed: Begin, Complete, Release, Renew
// and Lookup racing Close either finish or fail with ErrClosed, never
// with the store's own error from under a closing engine.
func TestIdemCallsRacingCloseGetErrClosed(t *testing.T) {
	for round := 0; round < 12; round++ {
		e, err := Open(Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 4*240)
		start := make(chan struct{})
		for i := 0; i < 240; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := []byte(fmt.Sprintf("k-%d-%d", round, i))
				c, err := e.Begin(ctx, key, []byte("f"), time.Minute)
				errs <- err
				if err != nil {
					return
				}
				switch i % 4 {
				case 0:
					errs <- e.Complete(ctx, key, c.Token, []byte("r"))
				case 1:
					errs <- e.Release(ctx, key, c.Token)
				case 2:
					errs <- e.Renew(ctx, key, c.Token, time.Minute)
				default:
					_, err := e.Lookup(ctx, key, nil)
					errs <- err
				}
			}()
		}
		close(start)
		time.Sleep(time.Duration(round) * 250 * time.Microsecond)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		var bad []error
		for err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) {
				bad = append(bad, err)
			}
		}
		if len(bad) > 0 {
			t.Fatalf("round %d: %d calls racing Close failed with another error than ErrClosed, the first: %v", round, len(bad), bad[0])
		}
	}
}
