package dedup

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup/rotate"
)

// The window advisor measures, on the live traffic, how late duplicates
// come and so how many the window lets through (Stats.WindowAdvice; the
// estimator is in advisor_estimate.go, docs/window.md explains it).
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
// is kept for advHorizonWindows windows more (rotate.Horizon), and a
// sampled key observed New again is looked up there: a match is a
// duplicate the window let through, at its cohort's age. The sample's
// chance matches (keys/2^32 a probe) and, in probabilistic mode, the
// filters' false positives among the Duplicates (their estimated rate
// times the new keys, once per bin) are counted beside, to be subtracted.
// A cohort's size is the count of its New verdicts.
//
// The sample adapts to a memory budget (Options.HorizonBytes): a hash's
// level is the count of leading zero bits of a remix of it, and the
// sample is the hashes of level k or more, a share 2^-k. k starts at
// log2(Options.HorizonSample) (0 by default: every key) and is raised,
// engine-wide, whenever a shard's horizon holds more than its share of
// the budget; every shard then drops the levels below k from its horizon
// and from its counts of matches, which it keeps per level. Membership
// is a pure function of the hash and k, so what stays is exactly what a
// sample of 2^-k would have kept and counted from the start: the
// estimator sees one sample factor, 2^k. k never falls.

// advHorizonWindows is how many windows past its expiry a cohort's sample
// is kept.
const advHorizonWindows = 8

// advMaxBins bounds the histogram's bins per shard; with the default 4
// generations a bin is an eighth of a span.
const advMaxBins = 512

// sampleLevel is the level of hash h in the horizon's sample: the
// leading zero bits of a multiplicative remix of h, at most
// rotate.HorizonLevels-1, independent of the shadow's sample (sampled),
// the shard index and the fragment the horizon keeps (the low 32 bits).
func sampleLevel(h uint64) int {
	return min(bits.LeadingZeros64(h*0xbf58476d1ce4e5b9), rotate.HorizonLevels-1)
}

// sampled returns h's level and whether h is in the horizon's sample, at
// the engine's current level. Without a horizon, none is.
func (a *shardAdvisor) sampled(h uint64) (int, bool) {
	if a.horizon == nil {
		return 0, false
	}
	a.sync()
	l := sampleLevel(h)
	return l, l >= a.level
}

// sync brings the shard's sample to the engine's level, dropping the
// levels below it.
func (a *shardAdvisor) sync() {
	if k := int(a.win.level.Load()); k > a.level {
		a.horizon.Drop(k)
		// The false matches expected at level l go as 4^-l (the probes
		// and the fragments probed both halve a level up): those of the
		// levels from k up are a 4^-(k - level) share of those from level.
		scale := math.Pow(4, -float64(k-a.level))
		for j := range a.leakFP {
			a.leakFP[j] *= scale
		}
		a.level = k
	}
}

// journal puts sampled hash h of level l into the horizon as a key of
// generation gen, and raises the engine's level while the shard's
// horizon is over its share of the budget.
func (a *shardAdvisor) journal(gen uint64, l int, h uint64) {
	if a.lastID != gen || a.last == nil {
		if _, ok := a.cohorts[gen]; !ok {
			return // a restored generation: its cohort's size is not known
		}
	}
	a.horizon.Add(gen, l, h)
	for a.horizon.Bytes() > a.win.shardBudget && a.level < rotate.HorizonLevels-1 {
		a.win.level.CompareAndSwap(int32(a.level), int32(a.level+1))
		a.sync()
	}
}

// windowState is the engine's event clock and the advisor's geometry, set
// by Open.
type windowState struct {
	// clock is the event clock (Unix ns) under Options.EventTime.
	clock atomic.Int64
	// horizon is whether the advisor keeps a horizon (Options.HorizonSample
	// not -1).
	horizon bool
	// level is the horizon's sample level k, engine-wide: the sample is
	// the hashes of level k or more (sampleLevel), 1 in 2^k. It only rises.
	level atomic.Int32
	// budget is Options.HorizonBytes; shardBudget its share per shard.
	budget, shardBudget uint64
	// span is a generation's span, bin the width of an age bin (span /
	// binsPerSpan), nbins the bins covering ages [0, Window + span +
	// advHorizonWindows*Window).
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

// initWindow sets the advisor's geometry and each shard's advisor, and
// under EventTime makes the event clock the engine's clock.
func (e *Engine) initWindow() {
	w := &e.win
	o := &e.opts
	n := o.Generations
	w.setGeometry(o.Window, n, advHorizonWindows)
	if o.EventTime {
		o.Now = e.eventNow
	}
	w.horizon = o.HorizonSample > 0
	if w.horizon {
		w.level.Store(int32(bits.TrailingZeros(uint(o.HorizonSample))))
		w.budget = uint64(o.HorizonBytes)
		w.shardBudget = w.budget / uint64(max(len(e.shards), 1))
		for l := range w.matches {
			w.matches[l] = make([]atomic.Uint64, w.nbins-w.j0)
		}
	}
	for i := range e.shards {
		a := &shardAdvisor{
			win:     w,
			caught:  make([]uint64, w.nbins),
			late:    make([]uint64, w.nbins),
			fpExp:   make([]float64, w.nbins),
			cohorts: map[uint64]*cohort{},
		}
		if w.horizon {
			a.leakFP = make([]float64, w.nbins-w.j0)
			a.horizon = rotate.NewHorizon(o.Window, n, time.Duration(advHorizonWindows)*o.Window)
			a.level = int(w.level.Load())
		}
		e.shards[i].adv = a
	}
}

// setGeometry sets the age bins for a window of n generations and a
// horizon of horizonWindows windows past it.
func (w *windowState) setGeometry(window time.Duration, n, horizonWindows int) {
	w.span = int64(window) / int64(n)
	spans := 1 + n + horizonWindows*n // Window + span + the horizon, in spans
	w.binsPerSpan = max(1, min(8, advMaxBins/spans))
	w.bin = w.span / int64(w.binsPerSpan)
	w.nbins = spans * w.binsPerSpan
	w.j0 = (1 + n) * w.binsPerSpan
}

// startEventClock starts the event clock, after a restore, at the start of
// the newest generation restored, so that the first events do not find an
// engine at the epoch.
func (e *Engine) startEventClock() {
	if !e.opts.EventTime {
		return
	}
	if g := e.newestGen.Load(); g > 0 {
		e.advanceClock(e.timing.Start(g))
	}
}

// eventNow is the engine's clock under EventTime.
func (e *Engine) eventNow() time.Time { return time.Unix(0, e.win.clock.Load()) }

// advanceClock moves the event clock to t if t is later.
func (e *Engine) advanceClock(t time.Time) {
	ns := t.UnixNano()
	for {
		c := e.win.clock.Load()
		if ns <= c || e.win.clock.CompareAndSwap(c, ns) {
			return
		}
	}
}

// cohort is one generation's keys in one shard: n observed New; dups
// caught so far.
type cohort struct {
	n, dups uint64
}

// shardAdvisor is a shard's part of the advisor, guarded by the shard's
// lock.
type shardAdvisor struct {
	// caught[j] counts the Duplicates at cohort age in bin j (the
	// horizon's matches are the engine's: windowState.matches). fpExp and
	// leakFP[j - j0] are the false matches expected among the caught and
	// the matched, leakFP of the sample at level.
	caught         []uint64
	late           []uint64 // New again while in flight, past the window (renewExpired)
	fpExp          []float64
	leakFP         []float64
	level          int // the sample level this shard's horizon and leakFP are at
	win            *windowState
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
}

// cohortOf returns generation gen's cohort, creating it.
func (a *shardAdvisor) cohortOf(gen uint64) *cohort {
	if a.last != nil && a.lastID == gen {
		return a.last
	}
	c := a.cohorts[gen]
	if c == nil {
		c = &cohort{}
		a.cohorts[gen] = c
	}
	a.lastID, a.last = gen, c
	return c
}

// noteNews counts n keys observed New into generation gen.
func (a *shardAdvisor) noteNews(gen uint64, n int) {
	a.cohortOf(gen).n += uint64(n)
	a.newsSince += uint64(n)
}

// ageBin returns the bin of a cohort of generation gen at now, or -1 past
// the last.
func (w *windowState) ageBin(gen uint64, now int64) int {
	age := now - int64(gen)*w.span
	if age < 0 {
		return 0
	}
	j := age / w.bin
	if j >= int64(w.nbins) {
		return -1
	}
	return int(j)
}

// noteDuplicate attributes a Duplicate of hash h, observed at now, to the
// cohort of generation gen, the one the exact store found it in; without
// one (gen 0: probabilistic mode, or a cache answered), to the oldest
// live generation whose filter may hold it. The shard's lock is held.
func (e *Engine) noteDuplicate(s *shard, h, gen uint64, now int64) {
	if gen == 0 {
		s.ring.Lookup(h, func(g *rotate.Generation) bool {
			gen = g.ID
			return true // go on: the oldest match is the first sighting
		})
	}
	if gen == 0 {
		return
	}
	a := s.adv
	c := a.cohorts[gen]
	if c == nil {
		return // a restored generation: its cohort's size is not known
	}
	if j := e.win.ageBin(gen, now); j >= 0 {
		a.caught[j]++
		c.dups++
	}
}

// noteNew looks a sampled key observed New at now up in the horizon. The
// shard's lock is held.
func (e *Engine) noteNew(s *shard, h uint64, now time.Time) {
	a := s.adv
	l, ok := a.sampled(h)
	if !ok {
		return
	}
	a.probes++
	a.probesAt[l]++
	ns := now.UnixNano()
	a.horizon.Probe(h, l, now, func(id uint64) {
		if j := e.win.ageBin(id, ns) - e.win.j0; j >= 0 {
			e.win.matches[l][j].Add(1)
		}
	})
}

// bookFalseMatches books the false matches expected among the horizon's
// probes since the last tick, at the cohort ages of now: a probe at level
// l meets each expired generation's fragments of level l, n of them
// matching by chance with probability n/2^32.
func (e *Engine) bookFalseMatches(a *shardAdvisor, now time.Time) {
	ns := now.UnixNano()
	a.horizon.Expired(now, func(id uint64, keys func(int) int) {
		j := e.win.ageBin(id, ns) - e.win.j0
		if j < 0 {
			return
		}
		for l := a.level; l < len(a.probesAt); l++ {
			if p := a.probesAt[l]; p > 0 {
				a.leakFP[j] += float64(p) * float64(keys(l)) / (1 << 32)
			}
		}
	})
	clear(a.probesAt[:])
}

// advTick runs at most once per bin of the clock, under the shard's lock:
// in probabilistic mode it books the false positives expected among the
// Duplicates of the new keys since the last tick, generation by
// generation; it folds the cohorts past the horizon and drops their
// samples.
func (e *Engine) advTick(s *shard, now time.Time) {
	a := s.adv
	ns := now.UnixNano()
	if ns < a.nextTick {
		return
	}
	a.nextTick = (ns/e.win.bin + 1) * e.win.bin
	if !e.exactMode && a.newsSince > 0 {
		// A new key meets generation g's filter, the oldest that answers
		// taking it, at g's rate: expected false Duplicates per new key.
		gens := s.ring.Generations()
		miss := 1.0
		a.fpCache = a.fpCache[:copy(a.fpCache, a.fpCache[max(0, len(a.fpCache)-len(gens)):])]
		for _, g := range gens {
			fp := a.fpRate(g)
			if c := a.cohorts[g.ID]; c != nil {
				if j := e.win.ageBin(g.ID, ns); j >= 0 {
					a.fpExp[j] += float64(a.newsSince) * fp * miss
				}
			}
			miss *= 1 - fp
		}
	}
	a.newsSince = 0
	if a.horizon != nil {
		a.sync()
		e.bookFalseMatches(a, now)
		a.horizon.Advance(now)
	}
	// Fold cohorts whose age is past the last bin.
	horizonEnd := int64(e.win.nbins) * e.win.bin
	for id, c := range a.cohorts {
		if ns-int64(id)*e.win.span >= horizonEnd {
			a.foldedN += c.n
			delete(a.cohorts, id)
			if a.last == c {
				a.last = nil
			}
		}
	}
}

// fpEntry is a generation's filter's FPRate at a count of keys.
type fpEntry struct {
	id, count uint64
	fp        float64
}

// fpRate is g's filter's FPRate, computed again only when its count of
// keys has changed: only the newest generation's does.
func (a *shardAdvisor) fpRate(g *rotate.Generation) float64 {
	n := g.Filter.Count()
	for i := range a.fpCache {
		if c := &a.fpCache[i]; c.id == g.ID {
			if c.count != n {
				c.count, c.fp = n, g.Filter.FPRate()
			}
			return c.fp
		}
	}
	fp := g.Filter.FPRate()
	a.fpCache = append(a.fpCache, fpEntry{g.ID, n, fp})
	return fp
}

// bytes is the memory the shard's advisor takes.
func (a *shardAdvisor) bytes() uint64 {
	n := uint64(len(a.caught))*24 + uint64(len(a.leakFP))*8 + uint64(len(a.cohorts))*64
	if a.horizon != nil {
		n += a.horizon.Bytes()
	}
	return n
}

// clampUnit returns x within [0, 1].
func clampUnit(x float64) float64 { return math.Max(0, math.Min(1, x)) }

// noteUncommitted attributes a duplicate of a key not yet committed (hash
// h), answered at now, to the cohort of the generation its first sighting
// went into. decide calls it for every Duplicate of a Done key, and for
// InFlight without ExplicitDone, where that answer is final (one loop
// observes, processes and commits: a key repeated before its commit is a
// duplicate, as `dedup filter` and RESP clients take it). Under
// ExplicitDone a worker tries an InFlight event again until it is
// Duplicate, counted then. The shard's lock is held.
func (e *Engine) noteUncommitted(s *shard, h uint64, key []byte, now int64) {
	gen, ok := s.undone.genOf(h, key, e.exactMode)
	if !ok {
		gen, ok = s.inflight.genOf(h, key, e.exactMode)
	}
	for _, sets := range [][]epochSet{s.older, s.committing} {
		for i := 0; !ok && i < len(sets); i++ {
			gen, ok = sets[i].set.genOf(h, key, e.exactMode)
		}
	}
	if !ok {
		return
	}
	// The cohort may not exist yet: a repeat within the batch that
	// first observed the key comes before the batch's news are counted.
	c := s.adv.cohortOf(gen)
	if j := e.win.ageBin(gen, now); j >= 0 {
		s.adv.caught[j]++
		c.dups++
	}
}
