package exact

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestMemGen adds keys of every size class (one-byte and two-byte length
// prefixes, the largest key) to a generation's table, through every growth
// of its index, both ways of regrowing it, and finds each of them, and no
// other.
func TestMemGen(t *testing.T) {
	for _, fromTags := range []int{1 << tagBits, minSlots} {
		t.Run(fmt.Sprintf("regrowFromTags=%d", fromTags), func(t *testing.T) {
			defer func(v int) { regrowFromTags = v }(regrowFromTags)
			regrowFromTags = fromTags
			rng := rand.New(rand.NewPCG(1, 2))
			seed := maphash.MakeSeed()
			g := &memGen{gen: 7}
			var keys [][]byte
			for i := 0; i < 200_000; i++ {
				var k []byte
				switch i % 1000 {
				case 0:
					k = make([]byte, 200+rng.IntN(1000)) // two-byte length
				case 999:
					k = make([]byte, MaxKeySize)
				default:
					k = make([]byte, 4+rng.IntN(21))
				}
				for j := range k {
					k[j] = byte(rng.Uint32())
				}
				binary.LittleEndian.PutUint32(k[len(k)-4:], uint32(i)) // distinct
				keys = append(keys, k)
				g.reserve(seed, 1)
				g.add(maphash.Bytes(seed, k), k)
			}
			if g.n != len(keys) || 2*g.n > len(g.slots) {
				t.Fatalf("%d keys in %d slots", g.n, len(g.slots))
			}
			for i, k := range keys {
				if !g.has(maphash.Bytes(seed, k), k) {
					t.Fatalf("key %d (%d bytes) not found", i, len(k))
				}
			}
			for i := 0; i < 10_000; i++ {
				k := []byte(fmt.Sprintf("absent-%d-with-a-long-tail", i))
				if g.has(maphash.Bytes(seed, k), k) {
					t.Fatalf("absent key %q found", k)
				}
			}
			n := 0
			g.each(func(off int, k []byte) {
				if string(g.keyAt(off)) != string(k) || string(k) != string(keys[n]) {
					t.Fatalf("key %d at offset %d differs", n, off)
				}
				n++
			})
			if n != len(keys) {
				t.Fatalf("each visited %d keys of %d", n, len(keys))
			}
		})
	}
}
