package dedup

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestXXH64MatchesDigest pins xxh64 to xxhash's seeded Digest, which the
// engine used before: hashes are persisted (the probabilistic log, the
// filters of snapshots), so they must not change.
func TestXXH64MatchesDigest(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for n := range 300 {
		for range 8 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			seed := r.Uint64()
			if r.IntN(8) == 0 {
				seed = 0
			}
			var d xxhash.Digest
			d.ResetWithSeed(seed)
			_, _ = d.Write(b)
			if got, want := xxh64(b, seed), d.Sum64(); got != want {
				t.Fatalf("len %d seed %#x: %#x, want %#x", n, seed, got, want)
			}
		}
	}
}

func BenchmarkHash(b *testing.B) {
	key := []byte("0000b1c2-7425-40de-944b-e07fc1f90ae7")
	b.Run("digest", func(b *testing.B) {
		for b.Loop() {
			var d xxhash.Digest
			d.ResetWithSeed(42)
			_, _ = d.Write(key)
			_ = d.Sum64()
		}
	})
	b.Run("xxh64", func(b *testing.B) {
		for b.Loop() {
			_ = xxh64(key, 42)
		}
	})
}
