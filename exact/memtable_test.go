package exact

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestMemGen adds keys of every size class (one-byte and two-byte length
// prefixes, the largest key) to a generation's table and finds each of
// them, and no other: with partitions split as keys arrive (a 64 MiB
// table), and with as many as the smallest table has, never split.
func TestMemGen(t *testing.T) {
	for _, c := range []struct {
		limit     int
		wantPBits uint
	}{{64 << 20, 12}, {256 << 10, minPartBits}} {
		t.Run(fmt.Sprint(c.limit), func(t *testing.T) {
			g := testMemGen(t, c.limit)
			if g.pbits != c.wantPBits {
				t.Fatalf("%d partition bits after %d keys, want %d", g.pbits, g.n, c.wantPBits)
			}
			g.free()
		})
	}
}

func testMemGen(t *testing.T, limit int) *memGen {
	rng := rand.New(rand.NewPCG(1, 2))
	seed := maphash.MakeSeed()
	g := newMemGen(7, limit)
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
		g.add(maphash.Bytes(seed, k), k)
	}
	if g.n != len(keys) {
		t.Fatalf("%d keys, want %d", g.n, len(keys))
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
	return g
}

// TestKeyFilter: no false negatives, a false-positive rate near the 1%
// the filters are sized for, and a stored filter reads back the same.
func TestKeyFilter(t *testing.T) {
	const n = 200_000
	f := newKeyFilter(n)
	for i := 0; i < n; i++ {
		f.add(keyHash(keyOf(i)))
	}
	g, err := unmarshalKeyFilter(f.marshal())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if !g.mayContain(keyHash(keyOf(i))) {
			t.Fatalf("key %d: false negative", i)
		}
	}
	fp := 0
	for i := n; i < 3*n; i++ {
		if g.mayContain(keyHash(keyOf(i))) {
			fp++
		}
	}
	rate := float64(fp) / (2 * n)
	t.Logf("false positives: %.3f%% at %d bits per key", 100*rate, filterBitsPerKey)
	if rate > 0.02 || rate < 0.002 {
		t.Fatalf("false-positive rate %.4f, want about 0.01", rate)
	}
	if _, err := unmarshalKeyFilter([]byte{filterFormat, 1, 2}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a short filter reads as %v", err)
	}
}
