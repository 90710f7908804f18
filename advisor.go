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
// oldest live generation whose filter holds it), at the cohort's age now: a histogram over age, in bins of a fraction of the span, of the
// duplicates caught, per shard. No time is stored per key. A cohort is
// caught until it expires from the window (age Window + span); past that,
// the horizon takes over: a sample of each cohort's hashes (a fixed
// 1/Options.HorizonSample of the hash space, 4 bytes each) is kept for
// advHorizonWindows windows more (rotate.Horizon), and a sampled key
// observed New again is looked up there: a match is a duplicate the
// window let through, at its cohort's age. The sample's chance matches
// (keys/2^32 a probe) and, in probabilistic mode, the filters' false
// positives among the Duplicates (their estimated rate times the new keys,
// once per bin) are counted beside, to be subtracted. A cohort's size is
// the count of its New verdicts.

// advHorizonWindows is how many windows past its expiry a cohort's sample
// is kept.
const advHorizonWindows = 3

// advMaxBins bounds the histogram's bins per shard; with the default 4
// generations a bin is an eighth of a span.
const advMaxBins = 512

// sampled reports whether h is in the horizon's sample: the top
// sampleBits bits of a multiplicative remix of h are zero, independent of
// the shadow's (sampled), the shard index and the fragment the horizon
// keeps (the low 32 bits). Without a horizon, none is.
func (a *shardAdvisor) sampled(h uint64) bool {
	return a.horizon != nil && (h*0xbf58476d1ce4e5b9)>>(64-a.sampleBits) == 0
}

// windowState is the engine's event clock and the advisor's geometry, set
// by Open.
type windowState struct {
	// clock is the event clock (Unix ns) under Options.EventTime.
	clock atomic.Int64
	// sample is the horizon's sampling factor (Options.HorizonSample), 0
	// without a horizon.
	sample int
	// span is a generation's span, bin the width of an age bin (span /
	// binsPerSpan), nbins the bins covering ages [0, Window + span +
	// advHorizonWindows*Window).
	span, bin   int64
	binsPerSpan int
	nbins       int
}

// initWindow sets the advisor's geometry and each shard's advisor, and
// under EventTime makes the event clock the engine's clock.
func (e *Engine) initWindow() {
	w := &e.win
	o := &e.opts
	n := o.Generations
	w.span = int64(o.Window) / int64(n)
	spans := 1 + n + advHorizonWindows*n // Window + span + the horizon, in spans
	w.binsPerSpan = max(1, min(8, advMaxBins/spans))
	w.bin = w.span / int64(w.binsPerSpan)
	w.nbins = spans * w.binsPerSpan
	if o.EventTime {
		o.Now = e.eventNow
	}
	w.sample = max(o.HorizonSample, 0)
	for i := range e.shards {
		a := &shardAdvisor{
			caught:  make([]uint64, w.nbins),
			late:    make([]uint64, w.nbins),
			leaks:   make([]uint64, w.nbins),
			fpExp:   make([]float64, w.nbins),
			leakFP:  make([]float64, w.nbins),
			cohorts: map[uint64]*cohort{},
		}
		if w.sample > 0 {
			a.horizon = rotate.NewHorizon(o.Window, n, time.Duration(advHorizonWindows)*o.Window)
			a.sampleBits = uint(bits.TrailingZeros(uint(w.sample)))
		}
		e.shards[i].adv = a
	}
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
	// caught[j] counts the Duplicates at cohort age in bin j; leaks[j] the
	// horizon's matches. fpExp and leakFP are the false matches expected
	// among them.
	caught, leaks  []uint64
	late           []uint64 // New again while in flight, past the window (renewExpired)
	fpExp, leakFP  []float64
	cohorts        map[uint64]*cohort
	lastID         uint64
	last           *cohort
	horizon        *rotate.Horizon // nil without one
	sampleBits     uint
	foldedN        uint64 // keys of cohorts past the horizon: exposed at every age
	newsSince      uint64 // New verdicts since the last tick
	nextTick       int64  // ns
	probes         uint64 // sampled New keys looked up in the horizon
	lastFoldOldest uint64
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
	if !a.sampled(h) {
		return
	}
	a.probes++
	ns := now.UnixNano()
	a.horizon.Probe(h, now, func(id uint64, keys int, match bool) {
		if _, ok := a.cohorts[id]; !ok {
			return
		}
		j := e.win.ageBin(id, ns)
		if j < 0 {
			return
		}
		a.leakFP[j] += float64(keys) / (1 << 32)
		if match {
			a.leaks[j]++
		}
	})
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
		for _, g := range gens {
			fp := g.Filter.FPRate()
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

// advBytes is the memory the shard's advisor takes.
func (a *shardAdvisor) bytes() uint64 {
	n := uint64(len(a.caught))*32 + uint64(len(a.cohorts))*64
	if a.horizon != nil {
		n += a.horizon.Bytes()
	}
	return n
}

// clampUnit returns x within [0, 1].
func clampUnit(x float64) float64 { return math.Max(0, math.Min(1, x)) }

// genOf returns the generation of key (hash h) in p; without exact, of
// the first entry of hash h. A nil set holds nothing.
func (p *inflightSet) genOf(h uint64, key []byte, exactMode bool) (uint64, bool) {
	if exactMode {
		return p.lookup(h, key)
	}
	if p == nil || p.n == 0 {
		return 0, false
	}
	if h == 0 {
		if len(p.zero) > 0 {
			return p.zero[0].gen, true
		}
		return 0, false
	}
	for i := p.slot(h); ; i = (i + 1) & p.mask {
		switch p.hashes[i] {
		case 0:
			return 0, false
		case h:
			return p.ents[p.idx[i]].gen, true
		}
	}
}

// noteInFlight attributes an InFlight answer of key (hash h) at now to the
// cohort of the generation its first sighting went into, under EventTime
// only: a replay answers each event once, where a worker pool tries an
// InFlight event again until it is Duplicate (counted then). The shard's
// lock is held.
func (e *Engine) noteInFlight(s *shard, h uint64, key []byte, now int64) {
	if !e.opts.EventTime {
		return
	}
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
	c := s.adv.cohorts[gen]
	if c == nil {
		return
	}
	if j := e.win.ageBin(gen, now); j >= 0 {
		s.adv.caught[j]++
		c.dups++
	}
}

// setGen moves the entry of key (hash h) in p to generation gen if its
// generation is below oldest, and returns the generation it had; without
// exact, the first entry of hash h. A nil set holds nothing.
func (p *inflightSet) setGenIfBelow(h uint64, key []byte, exactMode bool, oldest, gen uint64) (uint64, bool) {
	if p == nil || p.n == 0 {
		return 0, false
	}
	move := func(en *inflightEntry) (uint64, bool) {
		old := en.gen
		if old >= oldest {
			return old, false
		}
		en.gen = gen
		return old, true
	}
	if h == 0 {
		for i := range p.zero {
			if !exactMode || string(p.key(p.zero[i])) == string(key) {
				return move(&p.zero[i])
			}
		}
		return 0, false
	}
	for i := p.slot(h); ; i = (i + 1) & p.mask {
		switch p.hashes[i] {
		case 0:
			return 0, false
		case h:
			en := &p.ents[p.idx[i]]
			if !exactMode || string(p.key(*en)) == string(key) {
				return move(en)
			}
		}
	}
}

// renewExpired is, under EventTime (without ExplicitDone), the answer to
// an observe of a key in flight whose first sighting's generation has
// left the window at the event clock: the sighting is past the window, so
// the key is New again, and its entry moves to generation a.gen, where
// its commit puts it (it would otherwise commit into an expired
// generation, that is nowhere). A key being committed stays InFlight. The
// advisor counts the duplicate as let through, at the old cohort's age.
// The shard's lock is held.
func (e *Engine) renewExpired(s *shard, h uint64, key []byte, a *admit) bool {
	if !e.opts.EventTime || e.opts.ExplicitDone {
		return false
	}
	oldest := s.ring.OldestLive(a.now)
	old, ok := s.inflight.setGenIfBelow(h, key, e.exactMode, oldest, a.gen)
	for i := 0; !ok && i < len(s.older); i++ {
		old, ok = s.older[i].set.setGenIfBelow(h, key, e.exactMode, oldest, a.gen)
	}
	if !ok {
		return false
	}
	s.uncount(old, 1)
	s.inflightGens[a.gen]++
	s.adv.cohortOf(a.gen).n++
	if c := s.adv.cohorts[old]; c != nil {
		if j := e.win.ageBin(old, a.now.UnixNano()); j >= 0 {
			s.adv.late[j]++
		}
	}
	return true
}
