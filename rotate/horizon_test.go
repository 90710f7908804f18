package rotate

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHorizonContains checks the interpolation search against a map on
// uniform fragments and on clustered ones (where interpolation guesses
// badly and the binary search finishes).
func TestHorizonContains(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, gen := range []func() uint32{
		rng.Uint32,
		func() uint32 { return rng.Uint32N(64) },
		func() uint32 { return []uint32{0, 1, 1 << 31, ^uint32(0)}[rng.IntN(4)] },
		func() uint32 { return uint32(rng.ExpFloat64() * 1000) },
	} {
		for _, n := range []int{0, 1, 2, 3, 10, 1000} {
			a := make([]uint32, n)
			in := map[uint32]bool{}
			for i := range a {
				a[i] = gen()
				in[a[i]] = true
			}
			slices.Sort(a)
			for range 2000 {
				f := gen()
				if contains(a, f) != in[f] {
					t.Fatalf("n %d: contains(%d) = %v, want %v", n, f, !in[f], in[f])
				}
			}
			for _, f := range a {
				if !contains(a, f) {
					t.Fatalf("n %d: %d held, not found", n, f)
				}
			}
		}
	}
}

// TestHorizonDrop checks that Drop frees the levels below its argument in
// every generation, keeps the others matching, and that Bytes and Keys
// follow.
func TestHorizonDrop(t *testing.T) {
	hz := NewHorizon(time.Minute, 4, 3*time.Minute)
	for id := uint64(1); id <= 3; id++ {
		for l := range 4 {
			for k := range 100 {
				hz.Add(id, l, uint64(id<<40|uint64(l)<<20|uint64(k)))
			}
		}
	}
	if hz.Keys() != 1200 || hz.Bytes() < 4800 {
		t.Fatalf("keys %d, bytes %d", hz.Keys(), hz.Bytes())
	}
	hz.Drop(2)
	if hz.Keys() != 600 || hz.Bytes() < 2400 || hz.Bytes() > 4800 {
		t.Fatalf("after Drop(2): keys %d, bytes %d", hz.Keys(), hz.Bytes())
	}
	// Generation 1 expires from the window at 2*15s + 1m.
	now := time.Unix(0, int64(2*15*time.Second+time.Minute))
	for l := range 4 {
		var matched bool
		hz.Probe(1<<40|uint64(l)<<20|7, l, now, func(id uint64) { matched = matched || id == 1 })
		keys := -1
		hz.Expired(now, func(id uint64, n func(int) int) {
			if id == 1 {
				keys = n(l)
			}
		})
		if want := map[bool]int{true: 100, false: 0}[l >= 2]; keys != want {
			t.Errorf("level %d: %d fragments after Drop(2), want %d", l, keys, want)
		}
		if matched != (l >= 2) {
			t.Errorf("level %d: match %v after Drop(2)", l, matched)
		}
	}
	hz.Advance(now.Add(10 * time.Minute))
	if hz.Keys() != 0 || hz.Bytes() != 0 || hz.Len() != 0 {
		t.Errorf("after Advance past the keep: keys %d, bytes %d, generations %d", hz.Keys(), hz.Bytes(), hz.Len())
	}
}

// TestRadixSortSorts pins the fragments' sort: every length around the
// switch to radix, uniform and clustered values, duplicates.
func TestRadixSortSorts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 255, 256, 257, 1000, 5000} {
		for _, mask := range []uint32{0xffffffff, 0xff00, 0x7} {
			a := make([]uint32, n)
			for i := range a {
				a[i] = r.Uint32() & mask
			}
			want := slices.Clone(a)
			slices.Sort(want)
			radixSort(a)
			if !slices.Equal(a, want) {
				t.Fatalf("n %d mask %#x: not sorted", n, mask)
			}
		}
	}
}

// TestHorizonAllMatchesOneByOne checks that AddAll journals what Add
// journals one hash at a time (the hashes of the levels from its floor
// up), and that ProbeAll matches what Probe matches, hash by hash, on
// generations held, expired, and a late key added to an expired one.
func TestHorizonAllMatchesOneByOne(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	level := func(h uint64) int { return int(h>>60) % 6 }
	const from = 2
	one := NewHorizon(time.Minute, 4, 3*time.Minute)
	all := NewHorizon(time.Minute, 4, 3*time.Minute)
	var held []uint64
	for id := uint64(1); id <= 6; id++ {
		hs := make([]uint64, 3000)
		for i := range hs {
			hs[i] = r.Uint64()
			if l := level(hs[i]); l >= from {
				one.Add(id, l, hs[i])
				held = append(held, hs[i])
			}
		}
		all.AddAll(id, hs, level, from)
	}
	if one.Keys() != all.Keys() || one.Bytes() != all.Bytes() {
		t.Fatalf("AddAll: %d keys, %d bytes; Add: %d keys, %d bytes", all.Keys(), all.Bytes(), one.Keys(), one.Bytes())
	}
	// Generations 1-3 have left the window (15s spans, 1m window), 4-6
	// not; a late key joins generation 1 after the bitmap is built.
	now := time.Unix(0, int64(4*15*time.Second+time.Minute))
	probes := append(slices.Clone(held[:2000]), make([]uint64, 2000)...)
	for i := 2000; i < len(probes); i++ {
		probes[i] = r.Uint64() | 2<<60
	}
	for round := range 2 {
		if round == 1 {
			late := r.Uint64() | 3<<60
			one.Add(1, level(late), late)
			all.AddAll(1, []uint64{late}, level, from)
			probes = append(probes, late)
		}
		want := map[[2]uint64]int{}
		for _, h := range probes {
			one.Probe(h, level(h), now, func(id uint64) { want[[2]uint64{h, id}]++ })
		}
		got := map[[2]uint64]int{}
		all.ProbeAll(probes, level, now, func(i int, id uint64) { got[[2]uint64{probes[i], id}]++ })
		if len(want) == 0 || !maps.Equal(got, want) {
			t.Fatalf("round %d: ProbeAll matched %d (hash, generation) pairs, Probe %d", round, len(got), len(want))
		}
		for k := range got {
			if k[1] > 3 {
				t.Fatalf("matched generation %d, still in the window", k[1])
			}
		}
	}
}
