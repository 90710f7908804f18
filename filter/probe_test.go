package filter

import (
	"math/rand/v2"
	"testing"
)

// TestProbeAllMatchesTest: ProbeAll answers, for every key, what asking
// each filter's Test would, whatever the mix of filters (blocked chains
// grown past their first link or not, links with k = 8 and others, bloom,
// cuckoo, interleaved), and keeps the answers already set.
func TestProbeAllMatchesTest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var fs []Filter
	var held []uint64
	add := func(k Kind, capacity uint64, fp float64, keys int) {
		f, err := New(k, capacity, fp)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			h := rng.Uint64()
			f.Add(h)
			if i%8 == 0 {
				held = append(held, h)
			}
		}
		fs = append(fs, f)
	}
	add(Blocked, 5000, 0.01, 5000)
	add(Blocked, 1000, 0.01, 4000) // grown: several links
	add(Blocked, 5000, 0.001, 5000)
	add(Blocked, 5000, 0.00005, 5000) // k = 16: probed on its own
	add(Bloom, 5000, 0.01, 5000)
	add(Cuckoo, 5000, 0.05, 5000)
	add(Interleaved, 5000, 0.01, 5000)
	add(Wide, 5000, 0.01, 5000)
	add(Wide, 1000, 0.01, 4000) // overflowed
	if c := fs[1].(*chain); len(c.links) < 2 || fs[3].(*chain).links[0].(*blocked).k == 8 {
		t.Fatalf("the mix is not the one meant: %d links", len(c.links))
	}
	hashes := make([]uint64, 20000)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	hashes = append(hashes, held...) // a hit in every filter and link
	for _, sub := range [][]Filter{fs, fs[:3], fs[3:], fs[:1], nil} {
		group := make([]int32, 0, len(hashes))
		for i := range hashes {
			if i%3 != 0 {
				group = append(group, int32(i))
			}
		}
		maybe := make([]bool, len(group))
		for j := range maybe {
			maybe[j] = j%97 == 0
		}
		ProbeAll(sub, hashes, group, maybe)
		hits := 0
		for j, i := range group {
			want := j%97 == 0
			for _, f := range sub {
				want = want || f.Test(hashes[i])
			}
			if maybe[j] != want {
				t.Fatalf("%d filters: key %d: ProbeAll %v, Test %v", len(sub), j, maybe[j], want)
			}
			if want {
				hits++
			}
		}
		t.Logf("%d filters: %d of %d keys maybe", len(sub), hits, len(group))
	}
}

// TestAddAllMatchesAdd: AddAll leaves a filter exactly as Add one hash at
// a time would (the same encoding), across a blocked link filling up and
// chaining, repeats included, and for bloom and interleaved.
func TestAddAllMatchesAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, k := range []Kind{Blocked, Bloom, Interleaved, Wide} { // cuckoo evicts at random: its encoding varies
		a, err := New(k, 3000, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := New(k, 3000, 0.01)
		var hs []uint64
		for i := range 10000 {
			h := rng.Uint64()
			if i%10 == 0 && len(hs) > 0 {
				h = hs[rng.IntN(len(hs))]
			}
			hs = append(hs, h)
		}
		for lo := 0; lo < len(hs); lo += 700 {
			run := hs[lo:min(lo+700, len(hs))]
			AddAll(a, run)
			for _, h := range run {
				b.Add(h)
			}
		}
		ea, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		eb, _ := b.MarshalBinary()
		if string(ea) != string(eb) || a.Count() != b.Count() {
			t.Fatalf("%v: AddAll left %d keys (%d bytes encoded), Add %d (%d bytes)", k, a.Count(), len(ea), b.Count(), len(eb))
		}
		if c, ok := a.(*chain); ok && k == Blocked && len(c.links) < 2 {
			t.Fatalf("blocked: %d links, the test meant to fill the first", len(c.links))
		}
	}
}
