package dedup

import (
	"cmp"

	"github.com/streamdedup/dedup/rotate"
)

// Sliding expiry (Options.Refresh): a sighting of a key remembered renews
// it, so that its window restarts.
//
// A Duplicate whose key is held only by generations older than the
// current one leaves a renewal: the key joins the shard's renewal set (in
// exact mode with its bytes), which the next commit writes into the
// current generation, store and filter, as it writes a New key. Until
// then the key answers Duplicate from its older generation, or, if that
// expires first, from the renewal set, which decide asks before it says
// New. A key in flight seen again moves to the current generation, where
// its commit puts it; one being committed leaves a renewal. Renewals
// count against MaxInFlight (they are held in memory until a commit) but
// are never refused. A renewal lost in a crash (not committed) is a key
// remembered from its previous sighting: it may expire early, it is never
// forgotten inside the window of a committed sighting.

// refreshDuplicate is called, under Options.Refresh, for a Duplicate of
// key (hash h) found in generation gen (0 if not known): unless the key is
// in generation a.gen already, it leaves a renewal into a.gen. The
// shard's lock is held.
func (e *Engine) refreshDuplicate(s *shard, h uint64, key []byte, gen uint64, a *admit) {
	if gen == 0 {
		gen = e.newestHolding(s, h, key)
	}
	if gen >= a.gen {
		return
	}
	e.renewInto(s, h, key, a.gen)
}

// newestHolding returns the newest generation that holds key (hash h): the
// cache of recent commits' if it knows the key, else the newest live
// filter's that may hold it (a false positive of a newer one skips a
// renewal: the key is then remembered from its previous sighting).
func (e *Engine) newestHolding(s *shard, h uint64, key []byte) uint64 {
	if e.exactMode {
		for i := len(s.recent) - 1; i >= 0; i-- {
			if gen, ok := s.recent[i].lookup(h, key); ok {
				return gen
			}
		}
	}
	var gen uint64
	s.ring.Lookup(h, func(g *rotate.Generation) bool {
		gen = g.ID
		return false
	})
	return gen
}

// renewInto leaves a renewal of key (hash h) into generation gen, unless
// one is there already.
func (e *Engine) renewInto(s *shard, h uint64, key []byte, gen uint64) {
	if s.renew == nil {
		s.renew = newInflightSet(0)
	}
	if g, ok := s.renew.genOf(h, key, e.exactMode); ok && g >= gen {
		return
	}
	for _, p := range s.renewing {
		if g, ok := p.genOf(h, key, e.exactMode); ok && g >= gen {
			return
		}
	}
	if old, ok := s.renew.setGenIfBelow(h, key, e.exactMode, gen, gen); ok {
		s.uncount(old, 1)
	} else {
		s.renew.add(h, key, gen, e.exactMode)
		e.inflightCount.Add(1)
	}
	s.inflightGens[gen]++
}

// refreshInFlight is called, under Options.Refresh, for an InFlight or
// Done repeat of key (hash h): its entry moves to generation a.gen, where
// its commit puts it; a key being committed leaves a renewal instead. The
// shard's lock is held.
func (e *Engine) refreshInFlight(s *shard, h uint64, key []byte, a *admit) {
	move := func(p *inflightSet) bool {
		if p == nil {
			return false
		}
		gen, ok := p.genOf(h, key, e.exactMode)
		if !ok {
			return false
		}
		if gen < a.gen {
			p.setGenIfBelow(h, key, e.exactMode, a.gen, a.gen)
			s.uncount(gen, 1)
			s.inflightGens[a.gen]++
		}
		return true
	}
	if move(s.undone) || move(s.inflight) {
		return
	}
	for _, es := range s.older {
		if move(es.set) {
			return
		}
	}
	for _, es := range s.committing {
		if gen, ok := es.set.genOf(h, key, e.exactMode); ok {
			if gen < a.gen {
				e.renewInto(s, h, key, a.gen)
			}
			return
		}
	}
}

// renewedLive reports whether key (hash h), which neither the in-flight
// sets nor the filters hold, has a renewal into a generation live at the
// clock of a: a Duplicate whose older generation expired before its
// renewal was committed, renewed into a.gen in turn. The shard's lock is
// held.
func (e *Engine) renewedLive(s *shard, h uint64, key []byte, a *admit) bool {
	if (s.renew == nil || s.renew.n == 0) && len(s.renewing) == 0 {
		return false
	}
	oldest := s.ring.OldestLive(a.now)
	live := false
	if g, ok := s.renew.genOf(h, key, e.exactMode); ok && g >= oldest {
		live = true
	}
	for _, p := range s.renewing {
		if g, ok := p.genOf(h, key, e.exactMode); ok && g >= oldest {
			live = true
		}
	}
	if live {
		e.renewInto(s, h, key, a.gen)
	}
	return live
}

// takeRenewals moves the shard's renewals to renewing, for the commit to
// write, and returns how many. The shard's lock is held.
func (s *shard) takeRenewals() int {
	if s.renew == nil || s.renew.n == 0 {
		return 0
	}
	n := s.renew.n
	s.renewing = append(s.renewing, s.renew)
	s.renew = newInflightSet(0)
	return n
}

// settleRenewals ends the commit of s.renewing: written (ok), the keys go
// into their generations' filters, if live (oldest and after); otherwise
// back into the renewal set, for a later commit. It returns how many
// renewals it let go (committed, or a newer one already waiting), and the
// first error of a filter. The shard's lock is held.
func (e *Engine) settleRenewals(s *shard, ok bool, oldest uint64) (gone int, err error) {
	for _, p := range s.renewing {
		p.each(func(h uint64, en inflightEntry) {
			key := p.key(en)
			if !ok {
				if _, held := s.renew.genOf(h, key, e.exactMode); !held {
					s.renew.add(h, key, en.gen, e.exactMode)
					return
				}
			}
			gone++
			s.uncount(en.gen, 1)
			if !ok || en.gen < oldest {
				return
			}
			g, gerr := s.ring.Get(en.gen)
			if gerr != nil {
				err = cmp.Or(err, gerr)
				return
			}
			g.Filter.Add(h)
		})
	}
	clear(s.renewing)
	s.renewing = s.renewing[:0]
	return gone, err
}

// renewingEach calls fn for each renewal being committed in s, with its
// key (exact mode) and generation. Only the commit leader calls it, without
// the lock: nothing else writes s.renewing during the commit.
func (s *shard) renewingEach(fn func(h uint64, key []byte, gen uint64)) {
	for _, p := range s.renewing {
		p.each(func(h uint64, en inflightEntry) { fn(h, p.key(en), en.gen) })
	}
}
