package filter

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func randomHashes(seed uint64, n int) []uint64 {
	r := rand.New(rand.NewPCG(seed, 7))
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = r.Uint64()
	}
	return hs
}

// TestFuseNoFalseNegatives: every hash given to BuildFuse, and every hash
// added after it, tests true, at every width, for sizes from empty up,
// with duplicates among the hashes.
func TestFuseNoFalseNegatives(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10, 100, 1000, 30000} {
		for _, w := range []int{1, 8, 9, 12, 16} {
			hs := randomHashes(uint64(n*31+w), n)
			if n >= 10 {
				hs = append(hs, hs[:n/10]...) // duplicates
			}
			want := append([]uint64(nil), hs...)
			f, err := BuildFuse(hs, w, 0.001)
			if err != nil {
				t.Fatalf("n %d w %d: %v", n, w, err)
			}
			for _, h := range want {
				if !f.Test(h) {
					t.Fatalf("n %d w %d: false negative for %#x", n, w, h)
				}
			}
			late := randomHashes(uint64(n+1000*w), 500)
			for _, h := range late {
				f.Add(h)
			}
			for _, h := range append(want, late...) {
				if !f.Test(h) {
					t.Fatalf("n %d w %d: false negative after late adds", n, w)
				}
			}
			g, err := Unmarshal(mustMarshal(t, f))
			if err != nil {
				t.Fatalf("n %d w %d: %v", n, w, err)
			}
			for _, h := range append(want, late...) {
				if !g.Test(h) {
					t.Fatalf("n %d w %d: false negative after a round trip", n, w)
				}
			}
			if g.Count() != f.Count() || g.SizeBytes() != f.SizeBytes() || g.Kind() != Fuse {
				t.Fatalf("n %d w %d: round trip gives count %d size %d kind %v, want %d %d fuse", n, w, g.Count(), g.SizeBytes(), g.Kind(), f.Count(), f.SizeBytes())
			}
		}
	}
}

// TestFuseFP: the measured false-positive rate is 2^-width within 10%, and
// the table takes what FuseBytes says.
func TestFuseFP(t *testing.T) {
	const n, probes = 200_000, 2_000_000
	for _, w := range []int{8, 9, 10} {
		f, err := BuildFuse(randomHashes(uint64(w), n), w, 0.001)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(99, uint64(w)))
		fp := 0
		for range probes {
			if f.Test(r.Uint64()) {
				fp++
			}
		}
		got, want := float64(fp)/probes, math.Ldexp(1, -w)
		if got < 0.9*want || got > 1.1*want {
			t.Errorf("width %d: measured fp %.5f, want %.5f within 10%%", w, got, want)
		}
		if f.FPRate() != want {
			t.Errorf("width %d: FPRate %g, want %g", w, f.FPRate(), want)
		}
		est := FuseBytes(n, w)
		if sz := f.SizeBytes(); float64(sz) > 1.02*float64(est) || float64(sz) < 0.98*float64(est) {
			t.Errorf("width %d: %d bytes, FuseBytes says %d", w, sz, est)
		}
		t.Logf("width %d: fp %.5f (2^-w %.5f), %.3f bytes a key", w, got, want, float64(f.SizeBytes())/n)
	}
}

func TestFuseWidth(t *testing.T) {
	for fp, want := range map[float64]int{0.5: 1, 0.01: 7, 1.0 / 256: 8, 0.002: 9, 0.0039: 9, 1e-9: 16} {
		if got := FuseWidth(fp); got != want {
			t.Errorf("FuseWidth(%g) = %d, want %d", fp, got, want)
		}
	}
}

func TestFuseBuildErrors(t *testing.T) {
	for _, c := range []struct {
		w    int
		late float64
	}{{0, 0.1}, {17, 0.1}, {8, 0}, {8, 1}, {8, math.NaN()}} {
		if _, err := BuildFuse(nil, c.w, c.late); err == nil {
			t.Errorf("BuildFuse(width %d, late %g) accepted", c.w, c.late)
		}
	}
	if _, err := New(Fuse, 100, 0.01); err == nil {
		t.Error("New(Fuse) accepted")
	}
	if k, err := ParseKind("fuse"); err != nil || k != Fuse {
		t.Errorf("ParseKind(fuse) = %v, %v", k, err)
	}
}

func fuseEncodings(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	for _, c := range []struct {
		n, w, late int
	}{{300, 9, 0}, {5, 8, 0}, {300, 9, 40}} {
		f, err := BuildFuse(randomHashes(uint64(c.n), c.n), c.w, 0.0001)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range randomHashes(uint64(c.n+1), c.late) {
			f.Add(h)
		}
		out[fmt.Sprintf("fuse-%d-keys-w%d-late-%d", c.n, c.w, c.late)] = mustMarshal(t, f)
	}
	return out
}

// TestFuseCorrupt: every single-byte change and truncation of a fuse
// encoding is rejected with ErrCorrupt; with the checksum fixed, each is
// rejected or decodes to a working filter that re-encodes the same.
func TestFuseCorrupt(t *testing.T) {
	for name, enc := range fuseEncodings(t) {
		for i := range enc {
			b := bytes.Clone(enc)
			b[i] ^= 0x40
			if _, err := Unmarshal(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: byte %d changed: %v", name, i, err)
			}
			if i < len(enc)-trailerLen {
				for _, x := range []byte{0x01, 0x80, 0xff} {
					b := bytes.Clone(enc)
					b[i] ^= x
					if err := checkDecode(rechecksum(b)); err != nil {
						t.Fatalf("%s: byte %d ^ %#x rechecksummed: %v", name, i, x, err)
					}
				}
			}
		}
		for n := range len(enc) {
			if _, err := Unmarshal(enc[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: truncated to %d: %v", name, n, err)
			}
			if n >= 4 {
				if err := checkDecode(rechecksum(append(bytes.Clone(enc[:n]), make([]byte, 8)...))); err != nil {
					t.Fatalf("%s: truncated to %d and rechecksummed: %v", name, n, err)
				}
			}
		}
	}
}

// TestFuseGolden: the committed fuse encodings (format version 1, seeds of
// FuzzUnmarshal) decode, hold their keys, and re-encode byte for byte.
// -update rewrites them.
func TestFuseGolden(t *testing.T) {
	encs := fuseEncodings(t)
	if *update {
		for name, b := range encs {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
			if err := os.WriteFile(filepath.Join(seedDir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	seeds := readSeeds(t)
	for name, b := range encs {
		got, ok := seeds[name]
		if !ok {
			t.Fatalf("no golden %s; run go test -run TestFuseGolden -update", name)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s: today's encoding differs from the golden file", name)
		}
		f, err := Unmarshal(got)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var n int
		fmt.Sscanf(name, "fuse-%d-", &n)
		for _, h := range randomHashes(uint64(n), n) {
			if !f.Test(h) {
				t.Fatalf("%s: false negative", name)
			}
		}
	}
}
