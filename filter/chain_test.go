package filter

import (
	"math"
	"strings"
	"testing"
)

// TestGrowthSchedule: a bloom or blocked chain gives link 0 31/32 of the
// target and its growth links the rest, the first of them a quarter of
// link 0, doubling; cuckoo keeps link 0 at 3/4 and twice-size links. The
// compound estimate stays within the target however far the chain grows.
func TestGrowthSchedule(t *testing.T) {
	const capacity, fp = 8000, 0.01
	for _, kind := range Kinds {
		t.Run(kind.String(), func(t *testing.T) {
			c := mustNew(t, kind, capacity, fp)
			wantFirst, wantNext := fp*31/32, uint64(capacity/4)
			if kind == Cuckoo {
				wantFirst, wantNext = fp*3/4, 2*capacity
			}
			if got := c.links[0].fpRate(); got != 0 {
				t.Fatalf("empty link 0 estimates %g", got)
			}
			if b, want := float64(c.links[0].sizeBytes()), linkKinds[kind].bytes(capacity, wantFirst); math.Abs(b-want) > 64 {
				t.Fatalf("link 0 has %g bytes, %g for %d keys at %g", b, want, capacity, wantFirst)
			}
			next := hashes(uint64(kind), allShards)
			for c.Count() < 12*capacity {
				c.Add(next())
			}
			// (Tables round up: a block of 64 bytes, a cuckoo table of 2^n.)
			if got := c.links[1].capacity(); got < wantNext || got > 2*wantNext {
				t.Errorf("first growth link holds %d keys, want about %d", got, wantNext)
			}
			if est := c.FPRate(); est > fp {
				t.Errorf("FPRate %g after growth to %d links, over %g", est, len(c.links), fp)
			}
			var sum float64
			for i := range len(c.links) + 20 {
				if i == 0 {
					sum += firstTarget(kind, fp)
				} else {
					sum += linkTarget(c.fp, c.r, i)
				}
			}
			if sum > fp*(1+1e-9) || sum < fp*0.999 {
				t.Errorf("link targets sum to %g, want %g", sum, fp)
			}
		})
	}
}

// TestOldScheduleGrows: a chain encoded with an earlier schedule (the
// committed seeds without "-r" in their names: base = the capacity link 0
// was asked for, r = 1/2 or 1/4) decodes and grows on that schedule.
func TestOldScheduleGrows(t *testing.T) {
	n := 0
	for name, b := range readSeeds(t) {
		if strings.HasPrefix(name, "interleaved") || strings.HasPrefix(name, "wide") || strings.HasPrefix(name, "fuse") || strings.Contains(name, "-r") {
			continue
		}
		n++
		f, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("seed %s: %v", name, err)
		}
		c := f.(*chain)
		if c.r != 0.25 && c.r != 0.5 || c.base > c.links[0].capacity() {
			t.Fatalf("seed %s: r %g, base %d, link 0 holds %d: not an earlier schedule", name, c.r, c.base, c.links[0].capacity())
		}
		links := len(c.links)
		next := hashes(uint64(n), allShards)
		for len(c.links) == links {
			c.Add(next())
		}
		if got, want := c.links[links].capacity(), linkCapacity(c.base, links); got < want {
			t.Errorf("seed %s: link %d holds %d, want base*2^i = %d", name, links, got, want)
		}
	}
	if n < 3 {
		t.Fatalf("%d first-schedule seeds", n)
	}
}

// TestRegrow: a journaling filter grows by rebuilding one link (never
// chaining while grow gives room), holds every hash it was given, a false
// positive at the time included, and meets its target; once grow says
// stop, it chains.
func TestRegrow(t *testing.T) {
	const fp, limit = 0.01, 40_000
	for _, kind := range Kinds {
		t.Run(kind.String(), func(t *testing.T) {
			f, err := New(kind, 64, fp)
			if err != nil {
				t.Fatal(err)
			}
			rg := f.(Regrower)
			grows := 0
			err = rg.StartJournal(func(keys uint64) (uint64, bool) {
				grows++
				if keys < f.Capacity() {
					t.Errorf("asked to grow with %d keys of %d", keys, f.Capacity())
				}
				if c := 2 * f.Capacity(); c <= limit {
					return c, true
				}
				return 0, false
			})
			if err != nil {
				t.Fatal(err)
			}
			c := f.(*chain)
			next := hashes(uint64(kind)+7, allShards)
			var keys []uint64
			for len(keys) < limit/2 {
				h := next()
				keys = append(keys, h)
				f.Add(h)
				if len(c.links) != 1 {
					t.Fatalf("%d links after %d keys while journaling", len(c.links), len(keys))
				}
			}
			if !rg.Journaling() || rg.JournalBytes() < 8*uint64(len(keys)) || grows < 5 {
				t.Fatalf("journaling %v, %d journal bytes for %d keys, %d grows", rg.Journaling(), rg.JournalBytes(), len(keys), grows)
			}
			if est := f.FPRate(); est > fp {
				t.Errorf("FPRate %g after regrowth", est)
			}
			for len(keys) < 3*limit {
				h := next()
				keys = append(keys, h)
				f.Add(h)
			}
			if rg.Journaling() || rg.JournalBytes() != 0 || len(c.links) < 2 {
				t.Fatalf("past the limit: journaling %v (%d bytes), %d links", rg.Journaling(), rg.JournalBytes(), len(c.links))
			}
			for _, h := range keys {
				if !f.Test(h) {
					t.Fatalf("false negative %#x", h)
				}
			}
			if est := f.FPRate(); est > fp {
				t.Errorf("FPRate %g after growth", est)
			}
			if err := rg.Regrow(1 << 20); err == nil {
				t.Error("Regrow without a journal succeeded")
			}
			if err := rg.StartJournal(nil); err == nil {
				t.Error("StartJournal on a filter that holds keys succeeded")
			}
		})
	}
}

// TestRegrowKeepsFalsePositives: a hash that tested true when it was added
// (a false positive of the small filter, so not inserted) is still held by
// the filter rebuilt larger, where it would not be a false positive.
func TestRegrowKeepsFalsePositives(t *testing.T) {
	for _, kind := range []Kind{Bloom, Blocked} {
		f, err := New(kind, 100, 0.3)
		if err != nil {
			t.Fatal(err)
		}
		rg := f.(Regrower)
		if err := rg.StartJournal(nil); err != nil {
			t.Fatal(err)
		}
		next := hashes(5, allShards)
		var fps []uint64
		for f.Count() < 100 {
			f.Add(next())
		}
		for len(fps) < 50 {
			h := next()
			if f.Test(h) {
				fps = append(fps, h)
				f.Add(h) // counted as held already: not inserted
			}
		}
		if err := rg.Regrow(1 << 16); err != nil {
			t.Fatal(err)
		}
		if len(f.(*chain).links) != 1 || f.FPRate() > 0.001 {
			t.Fatalf("%s: rebuilt into %d links at FPRate %g", kind, len(f.(*chain).links), f.FPRate())
		}
		for _, h := range fps {
			if !f.Test(h) {
				t.Fatalf("%s: a hash added as a false positive is lost by Regrow", kind)
			}
		}
	}
}

// TestOverLimitNamesTheTable: a capacity whose first table is over its
// kind's limit is refused by New and EstimateBytes with an error giving
// the size asked and the limit; nothing is allocated.
func TestOverLimitNamesTheTable(t *testing.T) {
	for _, kind := range []Kind{Bloom, Cuckoo, Blocked} {
		const capacity, fp = 1 << 48, 1e-9
		_, err := New(kind, capacity, fp)
		if err == nil || !strings.HasPrefix(err.Error(), "filter: capacity 281474976710656 at fp 1e-09 needs ") || !strings.Contains(err.Error(), " table, over its ") {
			t.Errorf("New(%s, 2^48, 1e-9) = %v, want the over-limit error", kind, err)
		}
		_, err2 := EstimateBytes(kind, capacity, fp)
		if err2 == nil || err == nil || err2.Error() != err.Error() {
			t.Errorf("EstimateBytes(%s, 2^48, 1e-9) = %v, want New's error %v", kind, err2, err)
		}
	}
}

// TestChainOnStop: a journaling filter told ChainOnStop, rebuilt without
// its journal at 4096 keys, chains growth links as large as the chain
// before them (each link doubles the chain) at the halving targets of the
// other half of fp: 32x link 0's keys take 6 links (7 allowed), where
// growth links starting at a quarter of link 0 take 8; it holds every hash, through
// an encoding too, and estimates its rate within fp.
func TestChainOnStop(t *testing.T) {
	const fp = 0.01
	for _, kind := range []Kind{Bloom, Blocked} {
		f, err := New(kind, 4096, fp)
		if err != nil {
			t.Fatal(err)
		}
		rg := f.(Regrower)
		if err := rg.StartJournal(func(keys uint64) (uint64, bool) { return 2 * keys, false }); err != nil {
			t.Fatal(err)
		}
		rg.ChainOnStop()
		next := hashes(uint64(kind)+11, allShards)
		var keys []uint64
		for range 64 * 4096 {
			h := next()
			keys = append(keys, h)
			f.Add(h)
		}
		c := f.(*chain)
		if rg.Journaling() || len(c.links) > 7 {
			t.Fatalf("%s: journaling %v, %d links for %d keys from 8192", kind, rg.Journaling(), len(c.links), len(keys))
		}
		if est := f.FPRate(); est > fp {
			t.Fatalf("%s: FPRate %g over %g", kind, est, fp)
		}
		b, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		g, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range keys {
			if !f.Test(h) || !g.Test(h) {
				t.Fatalf("%s: false negative", kind)
			}
		}
		t.Logf("%s: %d keys in %d links, %.2f B/key, FPRate %.4f", kind, len(keys), len(c.links), float64(f.SizeBytes())/float64(len(keys)), f.FPRate())
	}
}
