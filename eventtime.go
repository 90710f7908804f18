package dedup

import (
	"fmt"
	"time"
)

// Event time: the window on the events' own times (Options.EventTime).
//
// The live generations change only at multiples of a span (a generation
// starts at one and expires, W later than its end, at another), so keys
// observed at any times within one span get the verdicts they would get at
// any other time of it. ObserveBatchTimes relies on that: it observes a
// batch in runs that never cross a span boundary. And a key still in
// flight (observed New, not durable yet) whose generation has left the
// window at the event clock is New again (renewExpired), in whichever set
// it waits: a key is never remembered past W + W/N of event time because
// its commit lags behind the events.

// ObserveBatchTimes is [Engine.ObserveBatchAt] with a time per event: keys[i]
// happened at times[i], on an engine opened with [Options.EventTime]. The
// clock moves as [Engine.ObserveAt] moves it, event by event (a late event
// is observed at the latest time seen so far), and the batch is observed in
// runs of events whose clock stays within one generation's span and within
// a tick (min(100 ms, Window/1000)) of the run's first, each at its latest
// time: every key is remembered at least Window and at most Window +
// Window/Generations of its own time, however much time the batch spans.
// Every key and time is checked before any is observed; if an error occurs
// while observing, the keys not observed have out[i] == 0.
func (e *Engine) ObserveBatchTimes(keys [][]byte, times []time.Time, out []Verdict) error {
	if !e.opts.EventTime {
		return ErrNoEventTime
	}
	if len(out) < len(keys) {
		return fmt.Errorf("%w: %d keys, %d verdicts", ErrBatchLength, len(keys), len(out))
	}
	if len(times) < len(keys) {
		return fmt.Errorf("%w: %d keys, %d times", ErrBatchLength, len(keys), len(times))
	}
	for i, k := range keys {
		if err := e.checkKey(k); err != nil {
			return wrap(err, "batch entry %d", i)
		}
		if err := e.checkEventTime(times[i]); err != nil {
			return wrap(err, "batch entry %d", i)
		}
	}
	clear(out[:len(keys)])
	tick := e.eventTick()
	clock := e.clock.Load()
	for i := 0; i < len(keys); {
		clock = max(clock, times[i].UnixNano())
		first, gen := clock, e.timing.GenerationAt(time.Unix(0, clock))
		j := i + 1
		for ; j < len(keys); j++ {
			c := max(clock, times[j].UnixNano())
			if c-first > tick || e.timing.GenerationAt(time.Unix(0, c)) != gen {
				break
			}
			clock = c
		}
		e.advanceClock(time.Unix(0, clock))
		if err := e.ObserveBatch(keys[i:j], out[i:j]); err != nil {
			return wrap(err, "batch entries %d to %d", i, j-1)
		}
		i = j
	}
	return nil
}

// eventTick is the longest run of event time ObserveBatchTimes observes at
// one time: min(100 ms, Window/1000), so that the window advisor's age bins
// (a 32nd of the window with 4 generations) see the delays unblurred.
func (e *Engine) eventTick() int64 {
	return min(int64(100*time.Millisecond), int64(e.opts.Window/1000))
}

// renewExpired is, under EventTime (without ExplicitDone), the answer to
// an observe of a key in flight whose first sighting's generation has
// left the window at the event clock: the sighting is past the window, so
// the key is New again. Its entry goes to generation a.gen in the set of
// the current epoch (see [Engine.Barrier]): a commit through an earlier
// barrier, which does not cover this sighting, must not make it durable.
// A key being committed keeps its entry there (the commit writes it into
// its expired generation, that is nowhere) and gets a new one. The advisor
// counts the duplicate as let through, at the old cohort's age. The
// shard's lock is held; a.gen is the current generation.
func (e *Engine) renewExpired(s *shard, h uint64, key []byte, a *admit) bool {
	if !e.opts.EventTime || e.opts.ExplicitDone {
		return false
	}
	oldest := s.ring.OldestLive(a.now)
	old, ok := s.inflight.setGenIfBelow(h, key, e.exactMode, oldest, a.gen)
	if ok {
		s.uncount(old, 1)
		e.noteRenewed(s, old, a)
		return true
	}
	if s.inflight.has(h, key, e.exactMode) {
		// In flight at a live generation, or renewed already.
		return false
	}
	for i := range s.older {
		set := s.older[i].set
		gen, held := set.genOf(h, key, e.exactMode)
		if !held {
			continue
		}
		if gen >= oldest {
			return false
		}
		set.remove(h, key, e.exactMode)
		s.inflight.add(h, key, a.gen, e.exactMode)
		s.uncount(gen, 1)
		e.noteRenewed(s, gen, a)
		return true
	}
	for i := range s.committing {
		gen, held := s.committing[i].set.genOf(h, key, e.exactMode)
		if !held {
			continue
		}
		if gen >= oldest {
			return false
		}
		// A second entry: the commit counts the first out of
		// MaxInFlight when it ends, so this one counts in, within the
		// slots reserved for the group if any are left (a renewal is
		// never refused: the keys being committed are within the limit).
		if a.reserved > 0 {
			a.reserved--
		} else {
			e.inflightCount.Add(1)
		}
		s.inflight.add(h, key, a.gen, e.exactMode)
		e.noteRenewed(s, gen, a)
		return true
	}
	return false
}

// noteRenewed counts a key renewed into a.gen out of generation old, for
// inflightGens and the advisor.
func (e *Engine) noteRenewed(s *shard, old uint64, a *admit) {
	s.inflightGens[a.gen]++
	if a.adv != nil {
		s.adv.Renewed(old, a.gen, a.now)
	}
}
