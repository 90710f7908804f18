package filter

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/streamdedup/dedup/internal/hashmix"
)

// shardMode selects which hashes a test feeds a filter: all of them, or only
// those one shard of 16 receives, as the engine picks shards.
type shardMode int

const (
	allShards   shardMode = iota
	shardMod16            // Splitmix64(h) % 16 == 0 (low bits of the remix)
	shardHigh16           // high bits of Splitmix64(h) * 16 == 0 (the engine's multiply-shift)
)

func (m shardMode) String() string {
	return [...]string{"all", "shard=mix%16", "shard=mix*16>>64"}[m]
}

// hashes returns a generator of pseudo-random hashes in shard mode m.
func hashes(seed uint64, m shardMode) func() uint64 {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	return func() uint64 {
		for {
			h := r.Uint64()
			switch m {
			case shardMod16:
				if hashmix.Splitmix64(h)%16 != 0 {
					continue
				}
			case shardHigh16:
				if hi, _ := bits.Mul64(hashmix.Splitmix64(h), 16); hi != 0 {
					continue
				}
			}
			return h
		}
	}
}

// addHashes adds n hashes from next to f and returns them.
func addHashes(f Filter, next func() uint64, n int) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = next()
		f.Add(keys[i])
	}
	return keys
}

// mustMarshal encodes f, failing the test on an error.
func mustMarshal(t testing.TB, f Filter) []byte {
	t.Helper()
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// roundTrip encodes f and decodes the encoding, failing the test on an
// error; it returns both.
func roundTrip(t testing.TB, f Filter) ([]byte, Filter) {
	t.Helper()
	enc := mustMarshal(t, f)
	g, err := Unmarshal(enc)
	if err != nil {
		t.Fatal(err)
	}
	return enc, g
}

func mustNew(t testing.TB, kind Kind, capacity uint64, fp float64) *chain {
	t.Helper()
	f, err := New(kind, capacity, fp)
	if err != nil {
		t.Fatal(err)
	}
	return f.(*chain)
}

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Kind
		err  bool
	}{
		{"bloom", Bloom, false},
		{"cuckoo", Cuckoo, false},
		{"blocked", Blocked, false},
		{"interleaved", Interleaved, false},
		{"wide", Wide, false},
		{"fuse", Fuse, false},
		{"", 0, true},
		{"Bloom", 0, true},
		{"xor", 0, true},
		{"kind(1)", 0, true},
	} {
		got, err := ParseKind(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "filter: ") {
			t.Errorf("ParseKind(%q) error %q lacks the package prefix", tc.in, err)
		}
	}
	for _, k := range Kinds {
		if got, err := ParseKind(k.String()); err != nil || got != k {
			t.Errorf("ParseKind(%v.String()) = %v, %v", k, got, err)
		}
	}
	if s := Kind(9).String(); s != "kind(9)" {
		t.Errorf("Kind(9).String() = %q", s)
	}
}

func TestNewValidation(t *testing.T) {
	for _, tc := range []struct {
		kind     Kind
		capacity uint64
		fp       float64
		bad      string // the argument the error must name, "" for success
	}{
		{Bloom, 1, 0.01, ""},
		{Cuckoo, 1, 0.5, ""},
		{Blocked, 1000, 1e-9, ""},
		{Bloom, 1 << 20, 0.999, ""},
		{0, 10, 0.01, "kind"},
		{Kind(5), 10, 0.01, "kind"},
		{Interleaved, 1000, 0.01, ""},
		{Interleaved, 0, 0.01, "capacity"},
		{Interleaved, 10, 1, "fp"},
		{Wide, 1000, 0.01, ""},
		{Wide, 0, 0.01, "capacity"},
		{Wide, 10, 1, "fp"},
		{Wide, 1<<48 + 1, 0.01, "capacity"},
		{Bloom, 0, 0.01, "capacity"},
		{Blocked, 1<<48 + 1, 0.01, "capacity"},
		{Cuckoo, 10, 0, "fp"},
		{Cuckoo, 10, 1, "fp"},
		{Bloom, 10, -0.1, "fp"},
		{Blocked, 10, math.NaN(), "fp"},
		{Blocked, 10, math.Inf(1), "fp"},
		{Cuckoo, 1 << 40, 1e-6, "bytes"}, // too big a table
	} {
		f, err := New(tc.kind, tc.capacity, tc.fp)
		_, eerr := EstimateBytes(tc.kind, tc.capacity, tc.fp)
		if tc.bad == "" {
			if err != nil || eerr != nil {
				t.Errorf("New(%v, %d, %g) = %v / EstimateBytes %v", tc.kind, tc.capacity, tc.fp, err, eerr)
				continue
			}
			if f.Kind() != tc.kind || f.Count() != 0 || f.Capacity() < tc.capacity || f.FPRate() != 0 {
				t.Errorf("New(%v, %d, %g): kind %v count %d capacity %d fp %g", tc.kind, tc.capacity, tc.fp, f.Kind(), f.Count(), f.Capacity(), f.FPRate())
			}
			continue
		}
		if err == nil {
			t.Errorf("New(%v, %d, %g) succeeded, want an error naming %s", tc.kind, tc.capacity, tc.fp, tc.bad)
			continue
		}
		if !strings.HasPrefix(err.Error(), "filter: ") || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("New(%v, %d, %g) error %q does not name %q", tc.kind, tc.capacity, tc.fp, err, tc.bad)
		}
	}
}

// TestNoFalseNegatives drives each kind well past its capacity (so it
// chains) with random hashes and repeats, against an exact oracle.
func TestNoFalseNegatives(t *testing.T) {
	const fp = 0.01
	capacity, inserts := 300_000, 3_000_000
	if testing.Short() || raceEnabled {
		capacity, inserts = 30_000, 300_000
	}
	for _, kind := range Kinds {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			f := mustNew(t, kind, uint64(capacity), fp)
			oracle := make(map[uint64]struct{}, inserts)
			keys := make([]uint64, 0, inserts)
			next := hashes(1, allShards)
			r := rand.New(rand.NewPCG(2, 3))
			var falsePos int
			for i := range inserts {
				var h uint64
				if i%10 == 9 { // a repeat of an earlier key
					h = keys[r.IntN(len(keys))]
				} else {
					h = next()
				}
				_, held := oracle[h]
				got := f.TestOrAdd(h)
				if held && !got {
					t.Fatalf("false negative: TestOrAdd(%#x) = false after it was added", h)
				}
				if !held {
					if got {
						falsePos++
					}
					oracle[h] = struct{}{}
					keys = append(keys, h)
				}
			}
			for _, h := range keys {
				if !f.Test(h) {
					t.Fatalf("false negative: Test(%#x) = false", h)
				}
			}
			if len(f.links) < 3 {
				t.Errorf("%d links after %d keys at capacity %d: the chain did not grow", len(f.links), len(keys), capacity)
			}
			if n := f.Count(); n > uint64(len(keys)) || n < uint64(len(keys)-falsePos) {
				t.Errorf("Count = %d, want %d distinct keys minus at most %d false positives", n, len(keys), falsePos)
			}
			if est := f.FPRate(); est > fp {
				t.Errorf("FPRate = %g after growth, over the target %g", est, fp)
			}
			if f.Capacity() < f.Count() {
				t.Errorf("Capacity %d < Count %d", f.Capacity(), f.Count())
			}
			t.Logf("%d distinct keys, %d links, count %d, %.2f bytes/key, FPRate %.5f, insert-time FP %.5f",
				len(keys), len(f.links), f.Count(), float64(f.SizeBytes())/float64(f.Count()), f.FPRate(), float64(falsePos)/float64(len(keys)))
		})
	}
}

// TestFalsePositiveRate measures the false-positive rate of each kind at
// its capacity and after growth, at 1% and 0.1%, with hashes from every
// shard and from one shard of 16 under the engine's remix, and checks it
// against the filter's own estimate:
//
//	est*0.8 - 3*sigma <= measured <= est*1.2 + 3*sigma,  est <= fp
//
// where sigma = sqrt(est*(1-est)/probes) is the binomial deviation of the
// measurement. The upper bound says the filter keeps its promise; the lower
// one that the estimate (and so the sizing) is honest, not padded.
func TestFalsePositiveRate(t *testing.T) {
	capacity, probes := uint64(100_000), 1_000_000
	if raceEnabled {
		capacity, probes = 20_000, 200_000
	}
	type tc struct {
		kind Kind
		fp   float64
		fill uint64 // keys inserted, as a multiple of capacity
		mode shardMode
	}
	var cases []tc
	for _, kind := range Kinds {
		for _, fp := range []float64{0.01, 0.001} {
			for _, mode := range []shardMode{allShards, shardMod16, shardHigh16} {
				cases = append(cases, tc{kind, fp, 1, mode})
			}
			cases = append(cases, tc{kind, fp, 3, allShards})
		}
	}
	for _, c := range cases {
		name := c.kind.String() + "/fp=" + formatFloat(c.fp) + "/fill=" + formatFloat(float64(c.fill)) + "x/" + c.mode.String()
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := mustNew(t, c.kind, capacity, c.fp)
			in := hashes(uint64(c.kind)*1000+uint64(c.fill), c.mode)
			for range c.fill * capacity {
				f.Add(in())
			}
			est := f.FPRate()
			if est > c.fp {
				t.Errorf("estimated FP %g over target %g", est, c.fp)
			}
			out := hashes(uint64(c.kind)*1000+uint64(c.fill)+1<<32, c.mode)
			var pos int
			for range probes {
				if f.Test(out()) {
					pos++
				}
			}
			got := float64(pos) / float64(probes)
			sigma := math.Sqrt(est * (1 - est) / float64(probes))
			lo, hi := est*0.8-3*sigma, est*1.2+3*sigma
			if got > hi || got < lo {
				t.Errorf("measured FP %.6f outside [%.6f, %.6f] around estimate %.6f (%d links, %d keys)", got, lo, hi, est, len(f.links), f.Count())
			}
			t.Logf("measured %.6f estimate %.6f target %g, %.2f bytes/key, %d links", got, est, c.fp, float64(f.SizeBytes())/float64(f.Count()), len(f.links))
		})
	}
}

func formatFloat(x float64) string {
	return strings.TrimRight(strings.TrimRight(strconvF(x), "0"), ".")
}

// TestCuckooChains fills a cuckoo filter to three times its nominal
// capacity: it must chain rather than let the library evict, and find every
// key.
func TestCuckooChains(t *testing.T) {
	for _, fp := range []float64{0.05, 0.01} {
		const capacity = 100_000
		f := mustNew(t, Cuckoo, capacity, fp)
		next := hashes(7, allShards)
		keys := addHashes(f, next, 3*capacity)
		if len(f.links) < 2 {
			t.Errorf("fp %g: %d links after 3x capacity: did not chain", fp, len(f.links))
		}
		for _, h := range keys {
			if !f.Test(h) {
				t.Fatalf("fp %g: key %#x lost", fp, h)
			}
		}
		for i, l := range f.links {
			c := l.(*cuckooFilter)
			if c.nLost != 0 || c.all {
				t.Errorf("fp %g: link %d lost fingerprints: an insert failed below the load bound", fp, i)
			}
			if load := float64(c.count()) / float64(c.slots); load > maxCuckooLoad {
				t.Errorf("fp %g: link %d load %.3f over %g", fp, i, load, maxCuckooLoad)
			}
		}
	}
}

// TestCuckooSmallTablesNeverFail fills many small cuckoo links to their load
// bound: not one library insert may fail.
func TestCuckooSmallTablesNeverFail(t *testing.T) {
	next := hashes(11, allShards)
	for i := range 300 {
		f := newCuckoo(uint64(1+i*7), 0.2) // at maxCuckooLoad
		for !f.full() {
			f.testOrAdd(next())
		}
		if f.nLost != 0 || f.all {
			t.Fatalf("table of %d slots lost a fingerprint at load %.3f", f.slots, float64(f.n)/float64(f.slots))
		}
	}
}

// TestCuckooFingerprint pins our copy of the library's fingerprint function,
// which the loss recovery depends on.
func TestCuckooFingerprint(t *testing.T) {
	next := hashes(13, allShards)
	for range 1000 {
		f := newCuckoo(1, 0.01)
		h := next()
		f.testOrAdd(h)
		var got byte
		for _, b := range f.cf.Encode() {
			if b != 0 {
				got = b
			}
		}
		if want := f.fingerprint(h); got != want {
			t.Fatalf("fingerprint(%#x) = %d, library stored %d", h, want, got)
		}
	}
}

// TestCuckooLossRecovery forces the library's insert to fail (a one-bucket
// table) and checks that no key is lost and the estimate rises.
func TestCuckooLossRecovery(t *testing.T) {
	f := newCuckoo(1, 0.01)
	f.cf = newLibCuckoo(4) // one bucket: the fifth fingerprint cannot fit
	f.slots, f.cap = 4, 100
	next := hashes(17, allShards)
	var keys []uint64
	for len(keys) < 12 {
		h := next()
		if f.testOrAdd(h) {
			continue
		}
		keys = append(keys, h)
		for _, k := range keys {
			if !f.test(k) {
				t.Fatalf("after %d inserts key %#x lost", len(keys), k)
			}
		}
	}
	if f.nLost == 0 && !f.all {
		t.Fatal("no loss recorded after overfilling a one-bucket table")
	}
	if !f.full() {
		t.Error("link not full after a failed insert")
	}
	if f.fpRate() < float64(f.nLost)/cuckooFPValues {
		t.Errorf("fpRate %g ignores %d lost values", f.fpRate(), f.nLost)
	}
	// and it survives encoding
	c := &chain{kind: Cuckoo, base: 1, fp: 0.01, r: tighten, links: []link{f}}
	_, d := roundTrip(t, c)
	for _, k := range keys {
		if !d.Test(k) {
			t.Fatalf("decoded: key %#x lost", k)
		}
	}
}

func TestBlockedAligned(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 7, 100, 1000, 4097} {
		f := newBlocked(n, 0.01)
		if p := uintptrOf(f.words); p%blockBytes != 0 {
			t.Errorf("capacity %d: table at %#x not 64-byte aligned", n, p)
		}
		if uint64(len(f.words)) != f.nblocks*blockWords {
			t.Errorf("capacity %d: %d words for %d blocks", n, len(f.words), f.nblocks)
		}
	}
}

// TestBlockedFPFormula checks the Poisson-mixture formula against the
// classic Bloom formula's limits: more bits per key lower the rate, and at
// useful loads a blocked filter is never better than an unblocked one of the
// same size.
func TestBlockedFPFormula(t *testing.T) {
	for _, k := range []int{1, 4, 8, 9, 16, 24, 32} {
		prev := 0.0
		for _, lambda := range []float64{1, 5, 10, 20, 40, 80, 160} {
			p := blockedFP(lambda, k)
			classic := math.Pow(-math.Expm1(-float64(k)*lambda/blockBits), float64(k))
			if (classic < 0.05 && p < classic*0.999) || p > 1 || p < prev {
				t.Errorf("k %d lambda %g: blocked %g, classic %g, previous %g", k, lambda, p, classic, prev)
			}
			prev = p
		}
	}
	for _, fp := range []float64{0.1, 0.01, 1e-3, 1e-5} {
		k, lambda := blockedParams(fp)
		if got := blockedFP(lambda, k); got > fp || got < fp*0.99 {
			t.Errorf("fp %g: params k %d lambda %g give %g", fp, k, lambda, got)
		}
	}
}

func TestErrorsWrap(t *testing.T) {
	_, err := Unmarshal([]byte("nope"))
	if !errors.Is(err, ErrCorrupt) || !strings.HasPrefix(err.Error(), "filter: ") {
		t.Errorf("Unmarshal(junk) = %v", err)
	}
}

// TestConcurrentReaders runs Test, FPRate and MarshalBinary from several
// goroutines at once on a filter no one adds to (run it with -race): the
// read methods must be safe together.
func TestConcurrentReaders(t *testing.T) {
	for _, kind := range Kinds {
		f := mustNew(t, kind, 5000, 0.01)
		next := hashes(21, allShards)
		keys := addHashes(f, next, 8000) // grown: two links
		want := mustMarshal(t, f)
		errs := make(chan error, 4)
		for g := range 4 {
			go func() {
				for i, h := range keys {
					if !f.Test(h) {
						errs <- fmt.Errorf("%v: reader %d: key %d lost", kind, g, i)
						return
					}
					if i%2000 == 0 {
						_ = f.FPRate()
						if b, err := f.MarshalBinary(); err != nil || !bytes.Equal(b, want) {
							errs <- fmt.Errorf("%v: reader %d: MarshalBinary changed: %v", kind, g, err)
							return
						}
					}
				}
				errs <- nil
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
}

// TestCuckooDecodedHistogram: the newest decoded cuckoo link carries the
// fingerprint histogram its loss recovery relies on.
func TestCuckooDecodedHistogram(t *testing.T) {
	f := mustNew(t, Cuckoo, 1000, 0.05)
	next := hashes(23, allShards)
	for range 1500 {
		f.Add(next())
	}
	_, g := roundTrip(t, f)
	links := g.(*chain).links
	last := links[len(links)-1].(*cuckooFilter)
	if last.hist == nil || *last.hist != *last.histogram() {
		t.Fatal("decoded newest link: histogram missing or wrong")
	}
	if want := f.links[len(f.links)-1].(*cuckooFilter).hist; *want != *last.hist {
		t.Fatal("decoded histogram differs from the original's")
	}
}

// TestBlockedPaths checks the unrolled k = 8 path and the general one
// against a reference of the layout (bit j in word j%8 at (lo*salt_j)>>26),
// and each k's measured FP against blockedFP.
func TestBlockedPaths(t *testing.T) {
	const nb, keys, probes = 2048, 40_000, 400_000
	for _, k := range []int{1, 5, 8, 9, 16, 24, 32} {
		f := &blocked{words: alignedWords(nb * blockWords), nblocks: nb, k: k, cap: 1 << 40}
		ref := make([]uint64, nb*blockWords)
		next := hashes(uint64(k), allShards)
		for range keys {
			h := next()
			f.testOrAdd(h)
			i := ((h >> 32) * nb) >> 32
			for j := range k {
				ref[i*8+uint64(j%8)] |= 1 << ((uint32(h) * blockSalts[j]) >> 26)
			}
			if !f.test(h) {
				t.Fatalf("k %d: %#x lost", k, h)
			}
		}
		for i := range ref {
			if ref[i] != f.words[i] {
				t.Fatalf("k %d: word %d is %#x, reference %#x", k, i, f.words[i], ref[i])
			}
		}
		out := hashes(uint64(k)+1<<40, allShards)
		pos := 0
		for range probes {
			if f.test(out()) {
				pos++
			}
		}
		got, est := float64(pos)/probes, f.fpRate()
		sigma := math.Sqrt(est * (1 - est) / probes)
		if got > est*1.2+3*sigma || got < est*0.8-3*sigma {
			t.Errorf("k %d: measured FP %.5f, estimate %.5f", k, got, est)
		}
	}
}

// TestPrefetch: Prefetch is a hint: for any hash, on every backend and on a
// chain that has grown links, it changes no answer and no count.
func TestPrefetch(t *testing.T) {
	for _, kind := range []Kind{Bloom, Cuckoo, Blocked} {
		f, err := New(kind, 1000, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(0); i < 3000; i++ { // past capacity: the chain grows
			f.Add(i * 0x9e3779b97f4a7c15)
		}
		pf, ok := f.(Prefetcher)
		if !ok {
			t.Fatalf("%v: not a Prefetcher", kind)
		}
		probes := []uint64{0, 1, 1 << 63, ^uint64(0)}
		for i := uint64(0); i < 2000; i++ {
			probes = append(probes, i*0xbf58476d1ce4e5b9)
		}
		before := make([]bool, len(probes))
		for i, h := range probes {
			before[i] = f.Test(h)
		}
		n := f.Count()
		for _, h := range probes {
			pf.Prefetch(h)
		}
		for i, h := range probes {
			if f.Test(h) != before[i] {
				t.Fatalf("%v: Test(%#x) changed after Prefetch", kind, h)
			}
		}
		if f.Count() != n {
			t.Fatalf("%v: Count %d -> %d after Prefetch", kind, n, f.Count())
		}
	}
}
