package dedup

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/internal/advisor"
	"github.com/streamdedup/dedup/rotate"
)

// Verdict is the answer of Observe for one key.
type Verdict uint8

// The verdicts.
const (
	// New is the first sighting within the window: the caller owns the
	// event, processes it, then Commits (or Forgets it if processing fails).
	// Under Options.ExplicitDone it calls Done once the event is processed.
	New Verdict = 1
	// Duplicate means the key was committed earlier within the window (or,
	// under Options.ExplicitDone, is Done: see Engine.Done): drop the event.
	Duplicate Verdict = 2
	// InFlight means the key was observed New since the last Commit and is
	// not committed yet (under Options.ExplicitDone: not Done yet): another
	// worker owns it. A worker pool tries the event again once the owner
	// is Done or has forgotten the key, until it is New or Duplicate, and
	// does not drop it: the owner may still Forget the key.
	InFlight Verdict = 3
)

// String returns "new", "duplicate" or "in-flight".
func (v Verdict) String() string {
	switch v {
	case New:
		return "new"
	case Duplicate:
		return "duplicate"
	case InFlight:
		return "in-flight"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

func (e *Engine) checkKey(key []byte) error {
	if err := e.usable(); err != nil {
		return err
	}
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if len(key) > e.opts.MaxKeySize {
		return fmt.Errorf("%w: %d bytes, MaxKeySize is %d", ErrKeyTooLarge, len(key), e.opts.MaxKeySize)
	}
	return nil
}

// keyShard checks key ([Engine.checkKey]) and returns its hash and the
// shard that holds it.
func (e *Engine) keyShard(key []byte) (uint64, *shard, error) {
	if err := e.checkKey(key); err != nil {
		return 0, nil, err
	}
	h := e.hash(key)
	return h, e.shardOf(h), nil
}

// lockKey is keyShard with the shard locked; once Close has begun it
// returns ErrClosed with the shard unlocked.
func (e *Engine) lockKey(key []byte) (uint64, *shard, error) {
	h, s, err := e.keyShard(key)
	if err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, nil, ErrClosed
	}
	return h, s, nil
}

// Observe reports whether key was seen within the window. New makes the
// caller the owner of the event until it commits ([Engine.Commit]) or
// forgets ([Engine.Forget]) it (under [Options.ExplicitDone], until it
// calls [Engine.Done] and a commit follows, or forgets it); every other
// Observe of the key meanwhile gets [InFlight]. A key longer than
// Options.MaxKeySize is refused with ErrKeyTooLarge.
func (e *Engine) Observe(key []byte) (Verdict, error) {
	h, s, err := e.keyShard(key)
	if err != nil {
		return 0, err
	}
	now := e.opts.Now()
	s.mu.Lock()
	v, err := e.observeIn(s, key, h, now)
	s.mu.Unlock()
	return v, err
}

// maxEventTime is the latest event time: int64 nanoseconds since the
// epoch.
var maxEventTime = time.Unix(0, math.MaxInt64)

// ObserveAt is [Engine.Observe] for an event that happened at t, on an
// engine opened with [Options.EventTime]: the engine's clock moves to t
// if t is later, and the key is observed at that clock. A late or
// out-of-order event is observed at the latest time seen so far, so it
// never expires anything early; its key joins the newest generation.
func (e *Engine) ObserveAt(key []byte, t time.Time) (Verdict, error) {
	if err := e.checkEventTime(t); err != nil {
		return 0, err
	}
	if err := e.checkKey(key); err != nil {
		return 0, err
	}
	e.advanceClock(t)
	return e.Observe(key)
}

// ObserveBatchAt is [Engine.ObserveBatch] for events that happened at t
// (a caller with one time per event groups them in runs of close times),
// on an engine opened with [Options.EventTime], with the clock of
// [Engine.ObserveAt].
func (e *Engine) ObserveBatchAt(keys [][]byte, t time.Time, out []Verdict) error {
	if err := e.checkEventTime(t); err != nil {
		return err
	}
	if len(out) < len(keys) {
		return fmt.Errorf("%w: %d keys, %d verdicts", ErrBatchLength, len(keys), len(out))
	}
	for i, k := range keys {
		if err := e.checkKey(k); err != nil {
			return wrap(err, "batch entry %d", i)
		}
	}
	e.advanceClock(t)
	return e.ObserveBatch(keys, out)
}

func (e *Engine) checkEventTime(t time.Time) error {
	if !e.opts.EventTime {
		return ErrNoEventTime
	}
	if t.Before(time.Unix(0, 0)) || t.After(maxEventTime) {
		return fmt.Errorf("%w: %v", ErrEventTime, t)
	}
	return nil
}

// ObserveBatch observes keys[i] into out[i], taking each shard's lock once.
// Every key is checked before any is observed: a nil, empty or oversized
// entry fails the whole batch with an error naming its index. If an error
// occurs while observing, the keys not observed have out[i] == 0. Repeated
// keys within a batch get New once and InFlight after.
func (e *Engine) ObserveBatch(keys [][]byte, out []Verdict) error {
	if len(out) < len(keys) {
		return fmt.Errorf("%w: %d keys, %d verdicts", ErrBatchLength, len(keys), len(out))
	}
	for i, k := range keys {
		if err := e.checkKey(k); err != nil {
			return wrap(err, "batch entry %d", i)
		}
	}
	clear(out[:len(keys)])
	if len(keys) == 0 {
		return nil
	}
	b := getBatchScratch(len(keys), len(e.shards))
	defer putBatchScratch(b)
	// Counting sort of the keys by shard, stable, so repeats keep order.
	for i, k := range keys {
		h := e.hash(k)
		si := e.shardIndex(h)
		b.hashes[i] = h
		b.shardOf[i] = int32(si)
		b.start[si+1]++
	}
	for i := 1; i < len(b.start); i++ {
		b.start[i] += b.start[i-1]
	}
	pos := b.pos
	copy(pos, b.start[:len(e.shards)])
	for i := range keys {
		si := b.shardOf[i]
		b.order[pos[si]] = int32(i)
		pos[si]++
	}
	now := e.opts.Now()
	gen := e.generationFor(now)
	// Shards another caller holds are left for a second pass, so that
	// concurrent batches, which visit the shards in the same order, do not
	// queue behind each other shard after shard.
	busy := b.busy[:0]
	for si := range e.shards {
		if b.start[si] == b.start[si+1] {
			continue
		}
		s := &e.shards[si]
		if !s.mu.TryLock() {
			busy = append(busy, int32(si))
			continue
		}
		if err := e.observeGroup(s, b, b.order[b.start[si]:b.start[si+1]], keys, out, now, gen); err != nil {
			return err
		}
	}
	for _, si := range busy {
		s := &e.shards[si]
		s.mu.Lock()
		if err := e.observeGroup(s, b, b.order[b.start[si]:b.start[si+1]], keys, out, now, gen); err != nil {
			return err
		}
	}
	b.busy = busy
	return nil
}

// observeGroup observes the keys of group, those of batch b that fall in
// shard s, whose lock the caller took and observeGroup releases.
func (e *Engine) observeGroup(s *shard, b *batchScratch, group []int32, keys [][]byte, out []Verdict, now time.Time, gen uint64) error {
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.ring.Advance(now)
	s.rollEpoch(e.epoch.Load())
	maybe := b.probe(s.ring, group)
	inflight := b.probeInflight(s, group, keys, e.exactMode)
	a := e.admitTo(s, gen, now)
	e.reserve(&a, len(group))
	// The set new keys join is asked here, key by key in order, not by
	// probeInflight: a key first observed earlier in this group is in it
	// by then, and the lookup finds the slot the insert takes.
	nk := s.newKeys()
	for _, i := range group[:min(prefetchAhead, len(group))] {
		nk.prefetchSlot(b.hashes[i])
	}
	for j, i := range group {
		if k := j + prefetchAhead; k < len(group) {
			nk.prefetchSlot(b.hashes[group[k]])
		}
		// Under ExplicitDone the keys in flight outside newKeys are Done.
		inFlight := inflight[j]
		done := inFlight && s.undone != nil
		var slot uint64
		if !inFlight {
			slot, inFlight = nk.findSlot(b.hashes[i], keys[i], e.exactMode)
		}
		v, err := e.decide(s, keys[i], b.hashes[i], maybe[j], inFlight && !done, done, slot, &a)
		if err != nil {
			e.finish(s, &a)
			s.mu.Unlock()
			return wrap(err, "batch entry %d", i)
		}
		if v != InFlight && !done && sampled(b.hashes[i]) && a.adv != nil {
			s.sample(b.hashes[i], maybe[j], now)
		}
		out[i] = v
	}
	e.finish(s, &a)
	s.mu.Unlock()
	return nil
}

// observeIn is Observe under the shard's lock.
func (e *Engine) observeIn(s *shard, key []byte, h uint64, now time.Time) (Verdict, error) {
	if s.closed {
		return 0, ErrClosed
	}
	s.ring.Advance(now)
	s.rollEpoch(e.epoch.Load())
	a := e.admitTo(s, e.generationFor(now), now)
	// Under ExplicitDone the keys in flight outside newKeys are Done.
	done := s.undone != nil && s.doneInFlight(h, key, e.exactMode)
	inFlight := !done && s.undone == nil && s.otherInFlight(h, key, e.exactMode)
	var slot uint64
	if !inFlight && !done {
		slot, inFlight = s.newKeys().findSlot(h, key, e.exactMode)
	}
	maybe := s.ring.Contains(h)
	v, err := e.decide(s, key, h, maybe, inFlight, done, slot, &a)
	if err == nil && v != InFlight && !done && sampled(h) && a.adv != nil {
		s.sample(h, maybe, now)
	}
	e.finish(s, &a)
	return v, err
}

// admit carries, through a group of decide calls under one shard lock, the
// generation new keys go into and the in-flight slots reserved for them,
// so that the shared counters are touched once per group, not per key,
// and the window advisor's counts of the group (nil with the advisor off).
type admit struct {
	gen      uint64
	now      time.Time
	reserved int64 // slots of MaxInFlight reserved and not yet used
	news     int   // keys admitted into gen
	adv      *advisor.Batch
}

// admitTo starts a group of keys observed in s at now, the New ones going
// into generation gen: the advisor's clock ticks if due and its batch
// begins. The shard's lock is held, the ring is advanced.
func (e *Engine) admitTo(s *shard, gen uint64, now time.Time) admit {
	a := admit{gen: gen, now: now}
	if !s.noAdvice {
		if s.adv.Due(now.UnixNano()) {
			s.adv.Tick(now, s.ring.Generations())
		}
		a.adv = s.adv.Begin(gen, now)
	}
	return a
}

// reserve tries to reserve n in-flight slots at once; without them decide
// checks the limit key by key.
func (e *Engine) reserve(a *admit, n int) {
	if e.inflightCount.Add(int64(n)) > int64(e.opts.MaxInFlight) {
		e.inflightCount.Add(-int64(n))
		return
	}
	a.reserved = int64(n)
}

// finish settles a group: counts its new keys against their generation and
// returns unused reserved slots. The shard's lock is held.
func (e *Engine) finish(s *shard, a *admit) {
	if a.news > 0 {
		s.inflightGens[a.gen] += a.news
	}
	if a.adv != nil {
		s.adv.Record()
	}
	if a.reserved > 0 {
		e.inflightCount.Add(-a.reserved)
	}
}

// decide gives the verdict for key once the filters and the in-flight
// sets have been asked: maybe says whether any live generation may hold h,
// inFlight whether the key is in flight (not Done) or, without
// ExplicitDone, being committed, done whether it is Done and not committed
// yet (a Duplicate, see [Engine.Done]), and if neither, slot is where s.newKeys()
// takes it (inflightSet.findSlot). The shard's lock is held, the ring is
// advanced; a New key goes into a.gen.
func (e *Engine) decide(s *shard, key []byte, h uint64, maybe, inFlight, done bool, slot uint64, a *admit) (Verdict, error) {
	if done {
		s.observed++
		s.dups++
		e.noteUncommitted(s, h, key, a)
		if e.opts.Refresh {
			e.refreshInFlight(s, h, key, a)
		}
		return Duplicate, nil
	}
	if inFlight {
		s.observed++
		if e.renewExpired(s, h, key, a) {
			s.news++
			return New, nil
		}
		if e.opts.Refresh {
			e.refreshInFlight(s, h, key, a)
		}
		s.inflightHits++
		if !e.opts.ExplicitDone {
			e.noteUncommitted(s, h, key, a)
		}
		return InFlight, nil
	}
	if maybe {
		if !e.exactMode {
			s.observed++
			s.dups++
			if a.adv != nil {
				a.adv.Caught(s.oldestHolding(h))
			}
			if e.opts.Refresh {
				e.refreshDuplicate(s, h, key, 0, a)
			}
			return Duplicate, nil
		}
		found, gen, err := e.committedIn(s, h, key)
		if err != nil {
			return 0, err
		}
		if found {
			s.observed++
			s.dups++
			if e.opts.Refresh {
				e.refreshDuplicate(s, h, key, gen, a)
			}
			if a.adv != nil {
				if gen == 0 { // a cache of recent commits answered
					gen = s.oldestHolding(h)
				}
				a.adv.Caught(gen)
			}
			return Duplicate, nil
		}
		s.falsePositives++
	}
	if e.opts.Refresh && e.renewedLive(s, h, key, a) {
		s.observed++
		s.dups++
		return Duplicate, nil
	}
	if a.reserved > 0 {
		a.reserved--
	} else if e.inflightCount.Add(1) > int64(e.opts.MaxInFlight) {
		e.inflightCount.Add(-1)
		if e.opts.ExplicitDone {
			return 0, fmt.Errorf("%w (MaxInFlight is %d, counting keys not yet Done: Done or Forget keys, then Commit)", ErrTooManyInFlight, e.opts.MaxInFlight)
		}
		return 0, fmt.Errorf("%w (MaxInFlight is %d)", ErrTooManyInFlight, e.opts.MaxInFlight)
	}
	s.newKeys().addAt(slot, h, key, a.gen, e.exactMode)
	if a.adv != nil {
		a.adv.New(h)
	}
	a.news++
	s.observed++
	s.news++
	return New, nil
}

// oldestHolding returns the oldest live generation whose filter may hold
// h, the one a Duplicate's first sighting most likely went into (0: none).
// The shard's lock is held.
func (s *shard) oldestHolding(h uint64) uint64 {
	var gen uint64
	s.ring.Lookup(h, func(g *rotate.Generation) bool {
		gen = g.ID
		return true // go on: the oldest match is the first sighting
	})
	return gen
}

// noteUncommitted counts, for the advisor, a duplicate of key (hash h) not
// yet committed, at the cohort of the generation its first sighting went
// into. decide calls it for every Duplicate of a Done key, and for
// InFlight without ExplicitDone, where that answer is final (one loop
// observes, processes and commits: a key repeated before its commit is a
// duplicate, as `dedup filter` and RESP clients take it). Under
// ExplicitDone a worker tries an InFlight event again until it is
// Duplicate, counted then. The shard's lock is held.
func (e *Engine) noteUncommitted(s *shard, h uint64, key []byte, a *admit) {
	if a.adv == nil {
		return
	}
	if gen, ok := s.uncommittedGen(h, key, e.exactMode); ok {
		a.adv.Caught(gen)
	}
}

// generationFor returns the generation a key observed New at now goes
// into: the one covering now, or the newest one any key went into if the
// clock has stepped back since.
func (e *Engine) generationFor(now time.Time) uint64 {
	id := e.timing.GenerationAt(now)
	for {
		newest := e.newestGen.Load()
		if id <= newest {
			return newest
		}
		if e.newestGen.CompareAndSwap(newest, id) {
			return id
		}
	}
}

// Forget releases a key observed New and not yet committed: its processing
// failed, and its next Observe is New again. It returns ErrNotInFlight if
// the key is not in flight, including when a Commit that holds it has
// already begun. Under [Options.ExplicitDone] it releases a key until
// [Engine.Done], whatever commits ran meanwhile, and returns
// ErrAlreadyDone after.
func (e *Engine) Forget(key []byte) error {
	h, s, err := e.lockKey(key)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.undone != nil {
		gen, err := s.removeUndone(h, key, e.exactMode, "Forget after Done")
		if err != nil {
			return err
		}
		s.uncount(gen, 1)
		e.inflightCount.Add(-1)
		return nil
	}
	gen, ok := s.inflight.remove(h, key, e.exactMode)
	for i := 0; !ok && i < len(s.older); i++ {
		gen, ok = s.older[i].set.remove(h, key, e.exactMode)
	}
	if ok {
		s.uncount(gen, 1)
		e.inflightCount.Add(-1)
		return nil
	}
	if hasIn(s.committing, h, key, e.exactMode) {
		return fmt.Errorf("%w: its commit has begun", ErrNotInFlight)
	}
	return ErrNotInFlight
}

type batchScratch struct {
	maybe    []bool
	inflight []bool
	hashes   []uint64
	shardOf  []int32
	order    []int32
	start    []int32
	pos      []int32
	busy     []int32
}

var batchPool sync.Pool

func getBatchScratch(n, shards int) *batchScratch {
	b, _ := batchPool.Get().(*batchScratch)
	if b == nil {
		b = &batchScratch{}
	}
	b.hashes = grow(b.hashes, n)
	b.maybe = grow(b.maybe, n)
	b.inflight = grow(b.inflight, n)
	b.shardOf = grow(b.shardOf, n)
	b.order = grow(b.order, n)
	b.start = grow(b.start, shards+1)
	clear(b.start)
	b.pos = grow(b.pos, shards)
	return b
}

func putBatchScratch(b *batchScratch) { batchPool.Put(b) }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// probe asks every live generation of r about the keys of group at once,
// generation by generation: the probes of one filter are independent of
// each other, so the processor overlaps their memory misses, where asking
// key by key would wait for each miss in turn. Filters do not change while
// the shard's lock is held, so the answers stay valid for the whole group.
func (b *batchScratch) probe(r *rotate.Ring, group []int32) []bool {
	maybe := b.maybe[:len(group)]
	r.Probe(b.hashes, group, maybe)
	return maybe
}

// prefetchAhead is how many filter operations ahead probe and the commit's
// inserts prefetch (filter.Prefetcher): enough misses in flight to cover
// DRAM latency, few enough that the lines are still cached when used.
const prefetchAhead = 8

// probeInflight reports, for each key of group, whether it is in flight
// or being committed in s, in a set other than s.newKeys(), set by set for
// the same reason as probe: the lookups of one set are independent, so
// their cache misses overlap. Those sets do not change while the shard's
// lock is held.
func (b *batchScratch) probeInflight(s *shard, group []int32, keys [][]byte, exactMode bool) []bool {
	inflight := b.inflight[:len(group)]
	clear(inflight)
	ask := func(p *inflightSet) {
		if p == nil || p.n == 0 {
			return
		}
		for _, i := range group[:min(prefetchAhead, len(group))] {
			p.prefetch(b.hashes[i])
		}
		for j, i := range group {
			if k := j + prefetchAhead; k < len(group) {
				p.prefetch(b.hashes[group[k]])
			}
			if !inflight[j] {
				inflight[j] = p.has(b.hashes[i], keys[i], exactMode)
			}
		}
	}
	// s.newKeys() is asked by the caller, key by key.
	if s.undone != nil {
		ask(s.inflight)
	}
	for _, es := range s.older {
		ask(es.set)
	}
	for _, es := range s.committing {
		ask(es.set)
	}
	return inflight
}

// committed reports whether key (hash h), which some live filter of s may
// hold, was committed into a live generation (exact mode): the cache of
// recent commits answers, or the store, generation by generation from the
// newest. The shard's lock is held.
func (e *Engine) committed(s *shard, h uint64, key []byte) (bool, error) {
	found, _, err := e.committedIn(s, h, key)
	return found, err
}

// committedIn is committed, and the generation the store found key in (0
// when a cache of recent commits answered).
func (e *Engine) committedIn(s *shard, h uint64, key []byte) (found bool, gen uint64, err error) {
	if s.recentlyCommitted(h, key) {
		return true, 0, nil
	}
	var fp exact.Fingerprint
	hashed := false
	s.ring.Lookup(h, func(g *rotate.Generation) bool {
		s.lookups++
		if !hashed {
			fp, hashed = e.store.Fingerprint(key), true
		}
		found, err = e.store.HasFingerprint(g.ID, fp)
		if found {
			gen = g.ID
		}
		return err == nil && !found
	})
	if err != nil {
		return false, 0, wrap(err, "store lookup")
	}
	return found, gen, nil
}
