package exact

import (
	"errors"
	"fmt"
	"testing"
)

// TestMemGen adds fingerprints to a generation's table and finds each of
// them, and no other, with the same first or second half as a stored one
// included: with partitions split as they arrive (a 64 MiB table), and
// with as many as the smallest table has, never split.
func TestMemGen(t *testing.T) {
	for _, c := range []struct {
		limit     int
		wantPBits uint
	}{{64 << 20, 12}, {128 << 10, minPartBits}} {
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
	g := newMemGen(7, limit)
	var fps []Fingerprint
	for i := 0; i < 200_000; i++ {
		fp := testFP(i)
		fps = append(fps, fp)
		g.add(&fp)
	}
	if g.n != len(fps) {
		t.Fatalf("%d keys, want %d", g.n, len(fps))
	}
	for i := range fps {
		if !g.has(&fps[i]) {
			t.Fatalf("fingerprint %d not found", i)
		}
	}
	for i := 0; i < 10_000; i++ {
		fp := testFP(1_000_000 + i)
		if g.has(&fp) {
			t.Fatalf("absent fingerprint %x found", fp)
		}
		// The same index hash (second half) as a stored one.
		fp = fps[i]
		fp[0] ^= 1
		if g.has(&fp) {
			t.Fatalf("fingerprint %x, one bit off a stored one, found", fp)
		}
	}
	n := 0
	g.each(func(off int, fp []byte) {
		if string(g.keyAt(off)) != string(fp) || string(fp) != string(fps[n][:]) {
			t.Fatalf("fingerprint %d at offset %d differs", n, off)
		}
		n++
	})
	if n != len(fps) {
		t.Fatalf("each visited %d keys of %d", n, len(fps))
	}
	return g
}

func fpHashOf(i int) uint64 { fp := testFP(i); return fpIndexHash(&fp) }

// TestKeyFilter: no false negatives, a false-positive rate near the 1%
// the filters are sized for, and a stored filter reads back the same.
func TestKeyFilter(t *testing.T) {
	const n = 200_000
	f := newKeyFilter(n)
	for i := 0; i < n; i++ {
		f.add(fpHashOf(i))
	}
	g, err := unmarshalKeyFilter(f.marshal())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if !g.mayContain(fpHashOf(i)) {
			t.Fatalf("key %d: false negative", i)
		}
	}
	fp := 0
	for i := n; i < 3*n; i++ {
		if g.mayContain(fpHashOf(i)) {
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
