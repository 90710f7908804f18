package dedup

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamdedup/dedup/internal/testclock"
)

// TestRecentSetModel checks compactRecent against the set it copies: with
// room for all, every key answers with its generation, and no other key
// does, across hashes shared by several keys (exact mode's collisions),
// hash 0, fingerprints shared by distinct hashes, keys of every length up
// to the largest, generations far apart and reuse of a dropped set's
// arrays; with less room, it holds exactly the newest keys that fit.
func TestRecentSetModel(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			p := newInflightSet(r.IntN(50))
			type entry struct {
				h   uint64
				key []byte
				gen uint64
			}
			var held []entry
			n := r.IntN(3000)
			baseGen := r.Uint64N(1 << 40)
			spread := []uint64{0, 1, 3, 300}[r.IntN(4)]
			for i := range n {
				var h uint64
				switch r.IntN(10) {
				case 0:
					h = 0
				case 1, 2:
					if len(held) > 0 {
						h = held[r.IntN(len(held))].h // shares a hash
					}
				case 3:
					h = r.Uint64()&^(1<<32-1) | 7 // shares a fingerprint
				default:
					h = r.Uint64()
				}
				key := fmt.Appendf(nil, "key-%d-%d", seed, i)
				if r.IntN(200) == 0 {
					key = append(key, bytes.Repeat([]byte{'x'}, r.IntN(maxKeySizeCap-len(key)+1))...)
				}
				gen := baseGen + r.Uint64N(spread+1)
				p.add(h, key, gen, true)
				held = append(held, entry{h, key, gen})
			}
			// Removals move entries: the set's order is what counts.
			for range r.IntN(50) {
				if len(held) == 0 {
					break
				}
				i := r.IntN(len(held))
				if _, ok := p.remove(held[i].h, held[i].key, true); !ok {
					t.Fatalf("remove of a held key failed")
				}
				held = append(held[:i], held[i+1:]...)
			}
			var order []entry
			p.each(func(h uint64, en inflightEntry) {
				order = append(order, entry{h, append([]byte(nil), p.key(en)...), en.gen})
			})
			var free *recentSet
			if r.IntN(2) == 0 {
				free = compactRecent(nil, p, 1<<30) // arrays to reuse
			}
			rs := compactRecent(free, p, 1<<30)
			var top uint64
			for _, en := range held {
				top = max(top, en.gen)
			}
			kept := 0
			for _, en := range order {
				gen, ok := rs.lookup(en.h, en.key)
				want := top-en.gen < 256
				if ok != want || ok && gen != en.gen {
					t.Fatalf("lookup(%#x, %.20q) = %d, %v; want %d, %v", en.h, en.key, gen, ok, en.gen, want)
				}
				if ok {
					kept++
				}
				// Same hash, so same bucket and fingerprint; other key.
				if _, ok := rs.lookup(en.h, append(en.key, '!')); ok {
					t.Fatalf("lookup of an absent key with a held hash succeeded")
				}
			}
			if rs == nil && kept > 0 || rs != nil && rs.n != kept {
				t.Fatalf("set holds %v keys, %d answer", rs, kept)
			}

			// A budget for part of the keys: a suffix of the entries in
			// insertion order, the keys of hash 0 left out.
			if len(p.ents) < 2 || spread == 300 {
				return
			}
			budget := rs.bytes() / 2
			part := compactRecent(nil, p, int(budget))
			if part == nil {
				t.Fatalf("no partial copy for budget %d", budget)
			}
			if part.bytes() > budget {
				t.Fatalf("partial copy: %d keys in %d bytes (arena %d, dir %d, gens %d) for budget %d", part.n, part.bytes(), len(part.arena), len(part.dir), len(part.gens), budget)
			}
			in := make([]bool, len(p.ents))
			for i, en := range p.ents {
				_, in[i] = part.lookup(en.h, p.key(en))
			}
			first := len(in)
			for first > 0 && in[first-1] {
				first--
			}
			for i := range first {
				if in[i] {
					t.Fatalf("entry %d of %d held, %d not: not a suffix", i, len(in), first)
				}
			}
			if first == len(in) || part.n >= rs.n {
				t.Fatalf("half the budget holds %d of %d keys", part.n, rs.n)
			}
		})
	}
}

// TestMemoryReleased pins the bounds on the memory the in-flight sets and
// the cache of recent commits hold: a burst's tables are given up within
// two commits of normal traffic, an idle commit interval releases the
// spares, and the cache stays within its budget while holding the newest
// keys.
func TestMemoryReleased(t *testing.T) {
	clk := testclock.New(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	// A Dir: without one the store is in memory and keeps no cache.
	e, err := Open(Options{Dir: t.TempDir(), Shards: 1, Window: time.Minute, ExpectedRate: 20000, Now: clk.Now, MaxInFlight: 1 << 22})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := &e.shards[0]
	n := 0
	observe := func(count int) {
		t.Helper()
		for range count {
			if v, err := e.Observe(fmt.Appendf(nil, "key-%08d", n)); err != nil || v != New {
				t.Fatalf("Observe: %v, %v", v, err)
			}
			n++
		}
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	observe(200_000)
	burst := e.Stats().InFlightBytes
	if burst < uint64(200_000*(inflightEntrySize+12)) {
		t.Fatalf("InFlightBytes = %d after a burst of 200k keys, want the burst's set kept", burst)
	}
	observe(10)
	observe(10)
	t.Logf("burst: InFlightBytes %d, after two small commits %d", burst, e.Stats().InFlightBytes)
	if st := e.Stats(); st.InFlightBytes > minSpareBytes {
		t.Fatalf("InFlightBytes = %d after two commits of 10 keys, want < %d", st.InFlightBytes, minSpareBytes)
	}
	observe(20_000)
	if len(s.spare) != 1 {
		t.Fatalf("%d spare sets after a commit of 20k keys, want 1", len(s.spare))
	}
	observe(0)
	if st := e.Stats(); st.InFlightBytes > uint64(inflightSetSize) || len(s.spare) != 0 {
		t.Fatalf("after an idle commit: InFlightBytes = %d, %d spares; want none", st.InFlightBytes, len(s.spare))
	}

	// The cache: within budget, and its newest keys answer without a
	// store lookup.
	for range 5 {
		observe(20_000)
		st := e.Stats()
		if s.budget <= 0 || st.CacheBytes > uint64(s.budget) || st.CacheBytes > max(st.FilterBytes/recentShare, recentFloor) {
			t.Fatalf("CacheBytes = %d, budget %d, FilterBytes %d", st.CacheBytes, s.budget, st.FilterBytes)
		}
		t.Logf("cache: %d keys in %d bytes, budget %d", st.CacheKeys, st.CacheBytes, s.budget)
		if st.CacheKeys == 0 || st.CacheKeys >= 20_000 {
			t.Fatalf("CacheKeys = %d, want some of the last commit's 20k", st.CacheKeys)
		}
	}
	lookups := e.Stats().StoreLookups
	if v, _ := e.Observe(fmt.Appendf(nil, "key-%08d", n-1)); v != Duplicate {
		t.Fatalf("newest key: %v", v)
	}
	if got := e.Stats().StoreLookups; got != lookups {
		t.Fatalf("duplicate of the newest key took %d store lookups", got-lookups)
	}
	if v, _ := e.Observe(fmt.Appendf(nil, "key-%08d", n-20_000)); v != Duplicate {
		t.Fatalf("oldest key of the last commit: %v", v)
	}
	if got := e.Stats().StoreLookups; got == lookups {
		t.Fatalf("duplicate of a key past the cache's budget took no store lookup")
	}
}

// TestRecentCacheFollowsFilters pins the cache's budget to the filters'
// memory held now, not to what ExpectedRate projects for a full window:
// a state holding few keys under a large ExpectedRate (dedup serve's
// defaults) keeps a cache of at most an eighth of its filters' bytes,
// and still answers the newest keys' duplicates from it.
func TestRecentCacheFollowsFilters(t *testing.T) {
	clk := testclock.New(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	e, err := Open(Options{Dir: t.TempDir(), Shards: 2, Window: time.Hour, ExpectedRate: 10000, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	n := 0
	for range 6 {
		for range 5000 {
			if v, err := e.Observe(fmt.Appendf(nil, "key:%012d", n)); err != nil || v != New {
				t.Fatalf("Observe: %v, %v", v, err)
			}
			n++
		}
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		clk.Advance(100 * time.Millisecond)
		st := e.Stats()
		t.Logf("%d keys: cache %d keys in %d bytes, filters %d bytes", n, st.CacheKeys, st.CacheBytes, st.FilterBytes)
		if st.CacheBytes > max(st.FilterBytes/recentShare, 2*recentFloor) {
			t.Fatalf("CacheBytes = %d, over an eighth of FilterBytes %d", st.CacheBytes, st.FilterBytes)
		}
		if st.CacheKeys == 0 {
			t.Fatalf("no key cached at %d keys", n)
		}
	}
	lookups := e.Stats().StoreLookups
	if v, _ := e.Observe(fmt.Appendf(nil, "key:%012d", n-1)); v != Duplicate {
		t.Fatalf("newest key: %v", v)
	}
	if got := e.Stats().StoreLookups; got != lookups {
		t.Fatalf("duplicate of the newest key took %d store lookups", got-lookups)
	}
}

// TestUndoneShrinks: under ExplicitDone the set of keys not yet Done lives
// across commits; once most of a burst is Done, a commit gives up the
// burst's table, and the keys left stay in flight.
func TestUndoneShrinks(t *testing.T) {
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprint("probabilistic=", prob), func(t *testing.T) {
			e, err := Open(Options{Shards: 1, ExplicitDone: true, Probabilistic: prob, MaxInFlight: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			const burst, left = 100_000, 10
			keys := make([][]byte, burst)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "key-%08d", i)
				if v, err := e.Observe(keys[i]); err != nil || v != New {
					t.Fatalf("Observe: %v, %v", v, err)
				}
			}
			if err := e.DoneBatch(keys[left:]); err != nil {
				t.Fatal(err)
			}
			// The second commit finds the shard idle and drops the spare,
			// the set the first one committed.
			for range 2 {
				if err := e.Commit(nil); err != nil {
					t.Fatal(err)
				}
			}
			st := e.Stats()
			if st.NotDoneKeys != left || st.InFlightBytes > minSpareBytes {
				t.Fatalf("after Done of all but %d keys and a commit: NotDoneKeys %d, InFlightBytes %d", left, st.NotDoneKeys, st.InFlightBytes)
			}
			for _, k := range keys[:left] {
				if v, err := e.Observe(k); err != nil || v != InFlight {
					t.Fatalf("Observe of a key not Done: %v, %v", v, err)
				}
				if err := e.Done(k); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
