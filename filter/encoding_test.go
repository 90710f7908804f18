package filter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed files under testdata/")

// TestRoundTrip encodes each kind empty, part-full and grown, decodes it,
// and checks that the copy answers exactly like the original, re-encodes to
// the same bytes, and keeps growing without losing a key.
func TestRoundTrip(t *testing.T) {
	for _, kind := range Kinds {
		for _, tc := range []struct {
			name     string
			capacity uint64
			fill     int
		}{
			{"empty", 1000, 0},
			{"half", 100_000, 50_000},
			{"grown", 20_000, 150_000},
		} {
			t.Run(kind.String()+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				f := mustNew(t, kind, tc.capacity, 0.01)
				next := hashes(uint64(kind)<<8+uint64(tc.fill), allShards)
				keys := addHashes(f, next, tc.fill)
				enc, g := roundTrip(t, f)
				if g.Kind() != f.Kind() || g.Count() != f.Count() || g.Capacity() != f.Capacity() ||
					g.SizeBytes() != f.SizeBytes() || g.FPRate() != f.FPRate() {
					t.Fatalf("decoded %v/%d/%d/%d/%g, original %v/%d/%d/%d/%g",
						g.Kind(), g.Count(), g.Capacity(), g.SizeBytes(), g.FPRate(),
						f.Kind(), f.Count(), f.Capacity(), f.SizeBytes(), f.FPRate())
				}
				for _, h := range keys {
					if !g.Test(h) {
						t.Fatalf("decoded filter lost %#x", h)
					}
				}
				probe := hashes(99, allShards)
				for range 200_000 {
					if h := probe(); f.Test(h) != g.Test(h) {
						t.Fatalf("Test(%#x): original %v, decoded %v", h, f.Test(h), g.Test(h))
					}
				}
				if !bytes.Equal(enc, mustMarshal(t, g)) {
					t.Fatal("re-encoding differs")
				}
				// The decoded filter keeps working, growing included.
				for range 2 * tc.capacity {
					h := next()
					keys = append(keys, h)
					g.Add(h)
				}
				for _, h := range keys {
					if !g.Test(h) {
						t.Fatalf("decoded filter lost %#x after further inserts", h)
					}
				}
				if est := g.FPRate(); est > 0.01 {
					t.Errorf("FPRate %g after growth of the decoded filter", est)
				}
			})
		}
	}
}

// smallEncodings returns small valid encodings of every kind, one link and
// several.
func smallEncodings(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	for _, kind := range Kinds {
		for _, tc := range []struct {
			capacity uint64
			fill     int
		}{{10, 5}, {4, 300}} {
			if kind == Cuckoo && tc.fill > 10 {
				tc.fill = 1000 // a cuckoo link holds at least 768 at this target
			}
			f, err := New(kind, tc.capacity, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			next := hashes(uint64(tc.fill), allShards)
			for range tc.fill {
				f.Add(next())
			}
			b, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			// The growth ratio names the schedule: "r0.25" files are also
			// what earlier versions wrote for every kind (see growth).
			c := f.(*chain)
			out[fmt.Sprintf("%s-%d-keys-%d-links-r%g", kind, tc.fill, len(c.links), c.r)] = b
		}
	}
	// Lanes: one of a 1-lane table (New), one past capacity with an
	// overflow filter, and lane 2 of a 5-lane table (12-bit fields).
	// The same for the wide layout (whole lines per lane).
	for _, kind := range []Kind{Interleaved, Wide} {
		for _, fill := range []int{5, 300} {
			f, err := New(kind, 100, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			next := hashes(uint64(fill), allShards)
			for range fill {
				f.Add(next())
			}
			b, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s-%d-keys-overflow-%v", kind, fill, f.(*LaneView).Overflowed())] = b
		}
		tb, err := NewLaneTable(LaneTableOptions{Lanes: 5, Capacity: 40, FalsePositiveRate: 0.1, Wide: kind == Wide})
		if err != nil {
			t.Fatal(err)
		}
		v, err := NewLaneView(tb, 2, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		next := hashes(77, allShards)
		for range 30 {
			v.Add(next())
		}
		b, err := v.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s-30-keys-lane-2-of-5", kind)] = b
	}
	return out
}

// rechecksum returns a copy of b with its checksum rewritten, so that a
// mutation reaches the parser.
func rechecksum(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) >= trailerLen {
		binary.LittleEndian.PutUint64(b[len(b)-trailerLen:], xxhash.Sum64(b[:len(b)-trailerLen]))
	}
	return b
}

// TestUnmarshalCorrupt: every truncation and every single-byte change of a
// small encoding is rejected with ErrCorrupt.
func TestUnmarshalCorrupt(t *testing.T) {
	for name, enc := range smallEncodings(t) {
		if _, err := Unmarshal(enc); err != nil {
			t.Fatalf("%s: valid encoding rejected: %v", name, err)
		}
		check := func(what string, b []byte) {
			t.Helper()
			f, err := Unmarshal(b)
			if err == nil || f != nil || !errors.Is(err, ErrCorrupt) || !strings.HasPrefix(err.Error(), "filter: ") {
				t.Fatalf("%s: %s: Unmarshal = %v, %v; want an error wrapping ErrCorrupt", name, what, f, err)
			}
		}
		check("nil", nil)
		for n := range len(enc) {
			check(fmt.Sprintf("truncated to %d bytes", n), enc[:n])
		}
		check("one byte appended", append(bytes.Clone(enc), 0))
		for i := range enc {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				b := bytes.Clone(enc)
				b[i] ^= x
				check(fmt.Sprintf("byte %d ^ %#x", i, x), b)
			}
		}
	}
}

// TestUnmarshalRechecksummed changes every byte of small encodings and
// fixes the checksum, so each change reaches the field checks: Unmarshal
// must reject it with ErrCorrupt or accept a filter that works and
// re-encodes to the same bytes. It must never panic.
func TestUnmarshalRechecksummed(t *testing.T) {
	for name, enc := range smallEncodings(t) {
		for i := range len(enc) - trailerLen {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				b := enc[:i:i]
				b = append(b, enc[i]^x)
				b = rechecksum(append(b, enc[i+1:]...))
				if err := checkDecode(b); err != nil {
					t.Fatalf("%s: byte %d ^ %#x: %v", name, i, x, err)
				}
			}
		}
		for n := headerLen; n < len(enc); n++ { // truncations that keep a valid checksum
			b := rechecksum(append(bytes.Clone(enc[:n]), 0, 0, 0, 0, 0, 0, 0, 0))
			if err := checkDecode(b); err != nil {
				t.Fatalf("%s: truncated to %d and rechecksummed: %v", name, n, err)
			}
		}
	}
}

// checkDecode decodes b; a rejection must wrap ErrCorrupt, an acceptance
// must give a usable filter that re-encodes to b.
func checkDecode(b []byte) error {
	f, err := Unmarshal(b)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("error %v does not wrap ErrCorrupt", err)
		}
		return nil
	}
	for h := range uint64(64) {
		f.Test(h * 0x9e3779b97f4a7c15)
	}
	_ = f.Count() + f.Capacity() + f.SizeBytes()
	_ = f.FPRate()
	again, err := f.MarshalBinary()
	if err != nil {
		return fmt.Errorf("accepted, then MarshalBinary: %v", err)
	}
	if !bytes.Equal(again, b) {
		return fmt.Errorf("accepted, but re-encodes differently")
	}
	return nil
}

const seedDir = "testdata/fuzz/FuzzUnmarshal"

// TestFuzzSeeds checks that the committed seed encodings (format version 1)
// still decode: they are the format's golden files. With -update it
// rewrites those smallEncodings names; files of other names (the chains
// of the first growth schedule, "<kind>-<n>-keys-<l>-links") stay.
func TestFuzzSeeds(t *testing.T) {
	if *update {
		if err := os.MkdirAll(seedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range smallEncodings(t) {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
			if err := os.WriteFile(filepath.Join(seedDir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	seeds := readSeeds(t)
	if len(seeds) < len(Kinds) {
		t.Fatalf("%d seed files under %s; run go test -run TestFuzzSeeds -update", len(seeds), seedDir)
	}
	for name, b := range seeds {
		f, err := Unmarshal(b)
		if err != nil {
			t.Errorf("seed %s: %v", name, err)
			continue
		}
		if f.Count() == 0 {
			t.Errorf("seed %s: empty filter", name)
		}
	}
}

func readSeeds(t testing.TB) map[string][]byte {
	ents, err := os.ReadDir(seedDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(seedDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(raw), "\n", 3)
		if len(lines) < 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("seed %s: not a fuzz corpus file", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("seed %s: %v", e.Name(), err)
		}
		out[e.Name()] = []byte(s)
	}
	return out
}

// FuzzUnmarshal feeds arbitrary bytes to Unmarshal, as given and with the
// checksum fixed (so the parser beyond the checksum is explored). Seeds: the
// files under testdata/fuzz/FuzzUnmarshal, which go test loads itself.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := checkDecode(data); err != nil {
			t.Fatal(err)
		}
		if err := checkDecode(rechecksum(data)); err != nil {
			t.Fatal(err)
		}
	})
}
