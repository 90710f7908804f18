package dedup

import (
	"encoding/binary"
	"sync"
	"testing"
)

// TestLargeCommitSettlesEveryShard commits more keys than settle spreads
// over goroutines (settleParallelKeys), in both modes, while other
// goroutines observe keys of their own, and checks that every committed
// key is Duplicate after: no shard's inserts are lost or raced (run it
// with -race).
func TestLargeCommitSettlesEveryShard(t *testing.T) {
	for _, probabilistic := range []bool{true, false} {
		opts := Options{Probabilistic: probabilistic, MaxInFlight: 1 << 20}
		if !probabilistic {
			opts.Dir = t.TempDir()
		}
		e, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		n := 2 * settleParallelKeys
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = binary.BigEndian.AppendUint64([]byte("settle-"), uint64(i))
		}
		out := make([]Verdict, n)
		if err := e.ObserveBatch(keys, out); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := make([]byte, 0, 16)
			for i := range 4096 {
				k = binary.BigEndian.AppendUint64(append(k[:0], "other-"...), uint64(i))
				if _, err := e.Observe(k); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := e.ObserveBatch(keys, out); err != nil {
			t.Fatal(err)
		}
		for i, v := range out[:n] {
			if v != Duplicate {
				t.Fatalf("probabilistic %v: key %d is %v after its commit, want duplicate", probabilistic, i, v)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
