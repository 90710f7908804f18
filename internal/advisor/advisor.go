// Package advisor is dedup's window advisor: it measures, on the live
// traffic, how late duplicates come and so how many the window lets
// through, and which window would let fewer through ([Advice]; docs/window.md
// explains the estimator).
//
// Expected usage: the engine makes one [Advisor] at Open and one [Shard] per
// shard of its own ([Advisor.NewShard]), and feeds each under that shard's
// lock, once per group of keys observed, with counts rather than per key:
// [Shard.Begin] starts a group and returns its [Batch], the verdicts go into
// the batch ([Batch.New], [Batch.Caught]), and [Shard.Record] books them.
// [Shard.Due] and [Shard.Tick] run the advisor's clock at most once per age
// bin; [Shard.Committed] journals the hashes a commit puts into a
// generation; [Shard.Renewed] counts a key seen again after its first
// sighting left the window. [Advisor.NewTotals] sums the shards for an
// estimate ([Totals.Advice]). The per-key loop knows nothing of how the
// counts are analysed.
//
// Its unit of account is the cohort: the keys observed New while one
// generation was current. A cohort's age is the clock minus its
// generation's start. Every Duplicate is attributed to the cohort of the
// generation the exact store found its key in (in probabilistic mode, the
// oldest live generation whose filter holds it), at the cohort's age
// now: a histogram over age, in bins of a fraction of the span, of the
// duplicates caught, per shard. No time is stored per key. A cohort is
// caught until it expires from the window (age Window + span); past that,
// the horizon takes over: a sample of each cohort's hashes (4 bytes each)
// is kept for HorizonWindows windows more (rotate.Horizon), and a
// sampled key observed New again is looked up there: a match is a
// duplicate the window let through, at its cohort's age. The sample's
// chance matches (keys/2^32 a probe) and, in probabilistic mode, the
// filters' false positives among the Duplicates (their estimated rate
// times the new keys, once per bin) are counted beside, to be subtracted.
// A cohort's size is the count of its New verdicts.
//
// The sample adapts to a memory budget (Config.HorizonBytes): a hash's
// level is the count of leading zero bits of a remix of it, and the
// sample is the hashes of level k or more, a share 2^-k. k starts at
// log2(Config.HorizonSample) and is raised, advisor-wide, whenever a
// shard's horizon holds more than its share of the budget; every shard
// then drops the levels below k from its horizon and from its counts of
// matches, which it keeps per level. Membership is a pure function of the
// hash and k, so what stays is exactly what a sample of 2^-k would have
// kept and counted from the start: the estimator sees one sample factor,
// 2^k. k never falls.
package advisor

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup/rotate"
)

// HorizonWindows is how many windows past its expiry a cohort's sample
// is kept.
const HorizonWindows = 8

// maxBins bounds the histogram's bins per shard; with the default 4
// generations a bin is an eighth of a span.
const maxBins = 512

// Config is the advisor's geometry and horizon.
type Config struct {
	// Window and Generations are the engine's window and its generations.
	Window      time.Duration
	Generations int
	// Shards is the number of [Shard]s the horizon's budget is split over.
	Shards int
	// HorizonSample is the horizon's first sample, 1 key in HorizonSample
	// (a power of two); 0 or less keeps no horizon.
	HorizonSample int
	// HorizonBytes is the horizon's memory budget over all shards.
	HorizonBytes int64
	// Probabilistic says that a Duplicate may be a filter's false positive:
	// Tick books those expected, to be subtracted.
	Probabilistic bool
}

// Advisor is the advisor's engine-wide state: its geometry, the horizon's
// sample level and the horizon's matches. Its methods are safe for
// concurrent use; a [Shard]'s are not.
type Advisor struct {
	cfg Config
	// horizon is whether the advisor keeps a horizon.
	horizon bool
	// level is the horizon's sample level k: the sample is the hashes of
	// level k or more (SampleLevel), 1 in 2^k. It only rises.
	level atomic.Int32
	// budget is Config.HorizonBytes; shardBudget its share per shard.
	budget, shardBudget uint64
	// span is a generation's span, bin the width of an age bin (span /
	// binsPerSpan), nbins the bins covering ages [0, Window + span +
	// HorizonWindows*Window).
	span, bin   int64
	binsPerSpan int
	nbins       int
	// j0 is the first bin past the window: age Window + span.
	j0 int
	// matches[l][j] counts the horizon's matches of keys of level l at
	// cohort age bin j0 + j, over shards: exact per level, so that the
	// counts of the sample at level k are the sum from level k up.
	matches [rotate.HorizonLevels][]atomic.Uint64
}

// New returns the advisor of cfg.
func New(cfg Config) *Advisor {
	a := &Advisor{cfg: cfg}
	a.setGeometry(cfg.Window, cfg.Generations, HorizonWindows)
	a.horizon = cfg.HorizonSample > 0
	if a.horizon {
		a.level.Store(int32(bits.TrailingZeros(uint(cfg.HorizonSample))))
		a.budget = uint64(cfg.HorizonBytes)
		a.shardBudget = a.budget / uint64(max(cfg.Shards, 1))
		for l := range a.matches {
			a.matches[l] = make([]atomic.Uint64, a.nbins-a.j0)
		}
	}
	return a
}

// NewShard returns a shard's part of the advisor.
func (a *Advisor) NewShard() *Shard {
	s := &Shard{
		adv:     a,
		caught:  make([]uint64, a.nbins),
		late:    make([]uint64, a.nbins),
		fpExp:   make([]float64, a.nbins),
		cohorts: map[uint64]*cohort{},
	}
	s.batch.level = noSample
	if a.horizon {
		s.leakFP = make([]float64, a.nbins-a.j0)
		s.horizon = rotate.NewHorizon(a.cfg.Window, a.cfg.Generations, time.Duration(HorizonWindows)*a.cfg.Window)
		s.level = int(a.level.Load())
	}
	return s
}

// setGeometry sets the age bins for a window of n generations and a
// horizon of horizonWindows windows past it.
func (a *Advisor) setGeometry(window time.Duration, n, horizonWindows int) {
	a.span = int64(window) / int64(n)
	spans := 1 + n + horizonWindows*n // Window + span + the horizon, in spans
	a.binsPerSpan = max(1, min(8, maxBins/spans))
	a.bin = a.span / int64(a.binsPerSpan)
	a.nbins = spans * a.binsPerSpan
	a.j0 = (1 + n) * a.binsPerSpan
}

// ageBin returns the bin of a cohort of generation gen at now, or -1 past
// the last.
func (a *Advisor) ageBin(gen uint64, now int64) int {
	age := now - int64(gen)*a.span
	if age < 0 {
		return 0
	}
	j := age / a.bin
	if j >= int64(a.nbins) {
		return -1
	}
	return int(j)
}

// SampleLevel is the level of hash h in the horizon's sample: the
// leading zero bits of a multiplicative remix of h, at most
// rotate.HorizonLevels-1, independent of the observed-FP shadow's sample,
// the shard index and the fragment the horizon keeps (the low 32 bits).
func SampleLevel(h uint64) int {
	return min(bits.LeadingZeros64(h*0xbf58476d1ce4e5b9), rotate.HorizonLevels-1)
}

// noSample is a Batch's level without a horizon: no hash reaches it.
const noSample = math.MaxInt

// cohort is one generation's keys in one shard: n observed New; dups
// caught so far.
type cohort struct {
	n, dups uint64
}

// Shard is a shard's part of the advisor. Its methods are not safe for
// concurrent use: the engine calls them under the shard's lock.
type Shard struct {
	// caught[j] counts the Duplicates at cohort age in bin j (the
	// horizon's matches are the Advisor's). fpExp and leakFP[j - j0] are
	// the false matches expected among the caught and the matched, leakFP
	// of the sample at level.
	caught         []uint64
	late           []uint64 // New again while in flight, past the window (Renewed)
	fpExp          []float64
	leakFP         []float64
	level          int // the sample level this shard's horizon and leakFP are at
	adv            *Advisor
	cohorts        map[uint64]*cohort
	lastID         uint64
	last           *cohort
	horizon        *rotate.Horizon              // nil without one
	foldedN        uint64                       // keys of cohorts past the horizon: exposed at every age
	newsSince      uint64                       // New verdicts since the last tick
	nextTick       int64                        // ns
	probes         uint64                       // sampled New keys looked up in the horizon
	probesAt       [rotate.HorizonLevels]uint32 // since the last tick, by level
	lastFoldOldest uint64
	fpCache        []fpEntry // the newest generations' FPRate, oldest first
	batch          Batch
}

// Batch gathers the verdicts of one group of keys observed under a
// shard's lock, for [Shard.Record].
type Batch struct {
	gen   uint64 // the generation keys observed New go into
	now   time.Time
	news  int
	level int // the horizon's sample level, noSample without a horizon
	// caught counts the Duplicates by the generation of their first
	// sighting.
	caught []genCount
	// sampled holds the hashes observed New that the horizon samples, to
	// be looked up there.
	sampled []uint64
}

type genCount struct {
	gen uint64
	n   uint64
}

// Begin starts a group of keys observed at now, the New ones going into
// generation gen, and returns the shard's batch to count them in until
// [Shard.Record].
func (s *Shard) Begin(gen uint64, now time.Time) *Batch {
	b := &s.batch
	b.gen, b.now, b.news = gen, now, 0
	b.caught, b.sampled = b.caught[:0], b.sampled[:0]
	if s.horizon != nil {
		s.sync()
		b.level = s.level
	}
	return b
}

// New counts a key of hash h observed New.
func (b *Batch) New(h uint64) {
	b.news++
	if SampleLevel(h) >= b.level {
		b.sampled = append(b.sampled, h)
	}
}

// Caught counts a Duplicate whose key's first sighting went into
// generation gen; 0 (not known) is not counted.
func (b *Batch) Caught(gen uint64) {
	if gen == 0 {
		return
	}
	for i := range b.caught {
		if b.caught[i].gen == gen {
			b.caught[i].n++
			return
		}
	}
	b.caught = append(b.caught, genCount{gen, 1})
}

// Record books the batch that [Shard.Begin] returned: its New keys into
// their cohort, its Duplicates at their cohorts' ages, and the sampled
// New keys looked up in the horizon.
func (s *Shard) Record() {
	b := &s.batch
	ns := b.now.UnixNano()
	if b.news > 0 {
		s.cohortOf(b.gen).n += uint64(b.news)
		s.newsSince += uint64(b.news)
	}
	for _, c := range b.caught {
		// A restored generation's cohort is not known: its size is not.
		if co := s.cohorts[c.gen]; co != nil {
			if j := s.adv.ageBin(c.gen, ns); j >= 0 {
				s.caught[j] += c.n
				co.dups += c.n
			}
		}
	}
	if len(b.sampled) > 0 {
		s.probe(b.sampled, b.now)
	}
}

// probe looks the sampled hashes hs observed New at now up in the
// horizon, all at once.
func (s *Shard) probe(hs []uint64, now time.Time) {
	a := s.adv
	// The level may have risen since the batch began: keep the hashes
	// still in the sample.
	n := 0
	for _, h := range hs {
		if l := SampleLevel(h); l >= s.level {
			s.probesAt[l]++
			hs[n] = h
			n++
		}
	}
	hs = hs[:n]
	s.probes += uint64(n)
	ns := now.UnixNano()
	s.horizon.ProbeAll(hs, SampleLevel, now, func(i int, id uint64) {
		if j := a.ageBin(id, ns) - a.j0; j >= 0 {
			a.matches[SampleLevel(hs[i])][j].Add(1)
		}
	})
}

// Renewed counts a key observed again while in flight after its first
// sighting, in generation old, left the window at now: it is New again,
// into generation gen, and a duplicate the window let through, at the old
// cohort's age.
func (s *Shard) Renewed(old, gen uint64, now time.Time) {
	s.cohortOf(gen).n++
	if c := s.cohorts[old]; c != nil {
		if j := s.adv.ageBin(old, now.UnixNano()); j >= 0 {
			s.late[j]++
		}
	}
}

// Committed journals the hashes hs, committed into generation gen, into
// the horizon's sample.
func (s *Shard) Committed(gen uint64, hs []uint64) {
	if s.horizon == nil {
		return
	}
	if s.lastID != gen || s.last == nil {
		if _, ok := s.cohorts[gen]; !ok {
			return // a restored generation: its cohort's size is not known
		}
	}
	s.sync()
	s.horizon.AddAll(gen, hs, SampleLevel, s.level)
	// Over its share of the budget, the shard raises the advisor's level
	// (once per group of hashes: a group of at most a few thousand
	// overshoots the share by that many fragments).
	for s.horizon.Bytes() > s.adv.shardBudget && s.level < rotate.HorizonLevels-1 {
		s.adv.level.CompareAndSwap(int32(s.level), int32(s.level+1))
		s.sync()
	}
}

// sync brings the shard's sample to the advisor's level, dropping the
// levels below it.
func (s *Shard) sync() {
	if k := int(s.adv.level.Load()); k > s.level {
		s.horizon.Drop(k)
		// The false matches expected at level l go as 4^-l (the probes
		// and the fragments probed both halve a level up): those of the
		// levels from k up are a 4^-(k - level) share of those from level.
		scale := math.Pow(4, -float64(k-s.level))
		for j := range s.leakFP {
			s.leakFP[j] *= scale
		}
		s.level = k
	}
}

// cohortOf returns generation gen's cohort, creating it.
func (s *Shard) cohortOf(gen uint64) *cohort {
	if s.last != nil && s.lastID == gen {
		return s.last
	}
	c := s.cohorts[gen]
	if c == nil {
		c = &cohort{}
		s.cohorts[gen] = c
	}
	s.lastID, s.last = gen, c
	return c
}

// Due reports whether the clock at now (Unix ns) has reached the next age
// bin since the last [Shard.Tick].
func (s *Shard) Due(now int64) bool { return now >= s.nextTick }

// Tick runs once per bin of the clock, when [Shard.Due], with the shard's
// live generations gens, oldest first: in probabilistic mode it books the
// false positives expected among the Duplicates of the new keys since the
// last tick, generation by generation; it folds the cohorts past the
// horizon and drops their samples.
func (s *Shard) Tick(now time.Time, gens []*rotate.Generation) {
	a := s.adv
	ns := now.UnixNano()
	s.nextTick = (ns/a.bin + 1) * a.bin
	if a.cfg.Probabilistic && s.newsSince > 0 {
		// A new key meets generation g's filter, the oldest that answers
		// taking it, at g's rate: expected false Duplicates per new key.
		miss := 1.0
		s.fpCache = s.fpCache[:copy(s.fpCache, s.fpCache[max(0, len(s.fpCache)-len(gens)):])]
		for _, g := range gens {
			fp := s.fpRate(g)
			if c := s.cohorts[g.ID]; c != nil {
				if j := a.ageBin(g.ID, ns); j >= 0 {
					s.fpExp[j] += float64(s.newsSince) * fp * miss
				}
			}
			miss *= 1 - fp
		}
	}
	s.newsSince = 0
	if s.horizon != nil {
		s.sync()
		s.bookFalseMatches(now)
		s.horizon.Advance(now)
	}
	// Fold cohorts whose age is past the last bin.
	horizonEnd := int64(a.nbins) * a.bin
	for id, c := range s.cohorts {
		if ns-int64(id)*a.span >= horizonEnd {
			s.foldedN += c.n
			delete(s.cohorts, id)
			if s.last == c {
				s.last = nil
			}
		}
	}
}

// bookFalseMatches books the false matches expected among the horizon's
// probes since the last tick, at the cohort ages of now: a probe at level
// l meets each expired generation's fragments of level l, n of them
// matching by chance with probability n/2^32.
func (s *Shard) bookFalseMatches(now time.Time) {
	a := s.adv
	ns := now.UnixNano()
	s.horizon.Expired(now, func(id uint64, keys func(int) int) {
		j := a.ageBin(id, ns) - a.j0
		if j < 0 {
			return
		}
		for l := s.level; l < len(s.probesAt); l++ {
			if p := s.probesAt[l]; p > 0 {
				s.leakFP[j] += float64(p) * float64(keys(l)) / (1 << 32)
			}
		}
	})
	clear(s.probesAt[:])
}

// fpEntry is a generation's filter's FPRate at a count of keys.
type fpEntry struct {
	id, count uint64
	fp        float64
}

// fpRate is g's filter's FPRate, computed again only when its count of
// keys has changed: only the newest generation's does.
func (s *Shard) fpRate(g *rotate.Generation) float64 {
	n := g.Filter.Count()
	for i := range s.fpCache {
		if c := &s.fpCache[i]; c.id == g.ID {
			if c.count != n {
				c.count, c.fp = n, g.Filter.FPRate()
			}
			return c.fp
		}
	}
	fp := g.Filter.FPRate()
	s.fpCache = append(s.fpCache, fpEntry{g.ID, n, fp})
	return fp
}

// Bytes is the memory the shard's advisor takes.
func (s *Shard) Bytes() uint64 {
	n := uint64(len(s.caught))*24 + uint64(len(s.leakFP))*8 + uint64(len(s.cohorts))*64 +
		8*uint64(cap(s.batch.sampled)) + 16*uint64(cap(s.batch.caught))
	if s.horizon != nil {
		n += s.horizon.Bytes()
	}
	return n
}

// HorizonBytes is the memory the shard's horizon holds (0 without one).
func (s *Shard) HorizonBytes() uint64 {
	if s.horizon == nil {
		return 0
	}
	return s.horizon.Bytes()
}

// clampUnit returns x within [0, 1].
func clampUnit(x float64) float64 { return math.Max(0, math.Min(1, x)) }

// DefaultHorizonBytes is the horizon's default memory budget
// (dedup.Options.HorizonBytes): 4 MiB.
const DefaultHorizonBytes = 4 << 20
