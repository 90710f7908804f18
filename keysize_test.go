package dedup_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/exact"
)

// TestMaxKeySizeIsTheStoreLimit: MaxKeySize cannot exceed what the exact
// store holds (exact.MaxKeySize), so a key that Observe accepts always
// commits; a longer one is refused by Observe with ErrKeyTooLarge and
// never enters in flight. Before, MaxKeySize 1 MiB was accepted, a 100 KiB
// key was New and every later Commit failed with an error that did not
// match ErrKeyTooLarge.
func TestMaxKeySizeIsTheStoreLimit(t *testing.T) {
	for _, size := range []int{exact.MaxKeySize + 1, 100 << 10, 1 << 20} {
		_, err := dedup.Open(dedup.Options{MaxKeySize: size})
		if !errors.Is(err, dedup.ErrInvalidOptions) || !strings.Contains(err.Error(), "MaxKeySize") {
			t.Fatalf("Open with MaxKeySize %d = %v, want ErrInvalidOptions naming MaxKeySize", size, err)
		}
	}
	forEachMode(t, func(t *testing.T, prob bool) {
		o := dedup.Options{Dir: t.TempDir(), MaxKeySize: exact.MaxKeySize, Probabilistic: prob}
		e := openT(t, o)
		big := bytes.Repeat([]byte{'k'}, exact.MaxKeySize)
		if v, err := e.Observe(big); err != nil || v != dedup.New {
			t.Fatalf("Observe of a key of MaxKeySize = %v, %v", v, err)
		}
		over := append(bytes.Clone(big), 'x')
		if _, err := e.Observe(over); !errors.Is(err, dedup.ErrKeyTooLarge) {
			t.Fatalf("Observe of a key over MaxKeySize = %v, want ErrKeyTooLarge", err)
		}
		out := make([]dedup.Verdict, 2)
		if err := e.ObserveBatch([][]byte{[]byte("a"), over}, out); !errors.Is(err, dedup.ErrKeyTooLarge) {
			t.Fatalf("ObserveBatch with a key over MaxKeySize = %v, want ErrKeyTooLarge", err)
		}
		if n := e.Stats().InFlightKeys; n != 1 {
			t.Fatalf("InFlightKeys = %d, want 1: a refused key must not be in flight", n)
		}
		if err := e.Commit([]byte("cp")); err != nil {
			t.Fatalf("Commit of a key of MaxKeySize: %v", err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openT(t, o)
		if v, err := e.Observe(big); err != nil || v != dedup.Duplicate {
			t.Fatalf("after reopen, the key of MaxKeySize = %v, %v; want Duplicate", v, err)
		}
	})
}
