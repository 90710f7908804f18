package dedup

import (
	"sync"
	"time"

	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/rotate"
)

// shard owns a slice of the hash space: its filters and in-flight keys.
// mu guards every field; every method of shard runs with it held.
type shard struct {
	mu     sync.Mutex
	closed bool
	ring   *rotate.Ring
	// inflight holds the keys observed New in epoch (see Barrier); older
	// holds those of earlier epochs not yet committed, oldest first;
	// committing holds those a commit is writing (nil otherwise). All
	// answer InFlight. The commit leader also reads committing without mu,
	// under the engine's commitGate.
	inflight   *inflightSet
	epoch      uint64
	older      []epochSet
	committing []epochSet
	// spare holds committed sets for reuse, so that their tables are not
	// allocated (and collected) anew at every epoch.
	spare []*inflightSet
	// recent holds, in exact mode, the sets of the last commits (see
	// recentKeys), oldest first: keys known durable, so that a duplicate
	// of one answers without a store lookup (see recentlyCommitted).
	recent []*inflightSet
	// inflightGens counts the keys in flight per generation: a past
	// generation with none can never change again (it is sealed).
	inflightGens map[uint64]int

	// Counters for Stats.
	observed, news, dups, inflightHits uint64
	falsePositives, lookups            uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// epochSet is the keys in flight of one epoch of one shard.
type epochSet struct {
	epoch uint64
	set   *inflightSet
}

// rollEpoch starts epoch cur in s: the keys in flight of the previous
// epoch move to older.
func (s *shard) rollEpoch(cur uint64) {
	if cur == s.epoch {
		return
	}
	if s.inflight.n > 0 {
		s.older = append(s.older, epochSet{s.epoch, s.inflight})
		s.inflight = s.newSet(s.inflight)
	}
	s.epoch = cur
}

// newSet returns an empty in-flight set, a spare one if there is one,
// sized to hold as many keys as like, the set it replaces.
func (s *shard) newSet(like *inflightSet) *inflightSet {
	var p *inflightSet
	if n := len(s.spare); n > 0 {
		p = s.spare[n-1]
		s.spare = s.spare[:n-1]
	} else {
		p = &inflightSet{}
	}
	p.init(like.n, len(like.arena))
	return p
}

// maxSpare bounds the spare sets a shard keeps.
const maxSpare = 2

// recycle keeps p, which nothing refers to any more, for reuse, unless its
// arena is large.
func (s *shard) recycle(p *inflightSet) {
	if len(s.spare) < maxSpare && cap(p.arena) <= 4<<20 {
		s.spare = append(s.spare, p)
	}
}

// inFlight reports whether key (hash h) is in flight or being committed.
func (s *shard) inFlight(h uint64, key []byte, exactMode bool) bool {
	return s.inflight.has(h, key, exactMode) || hasIn(s.older, h, key, exactMode) || hasIn(s.committing, h, key, exactMode)
}

func hasIn(sets []epochSet, h uint64, key []byte, exactMode bool) bool {
	for _, es := range sets {
		if es.set.has(h, key, exactMode) {
			return true
		}
	}
	return false
}

// takeThrough removes and returns the sets of epochs <= limit.
func (s *shard) takeThrough(limit uint64) []epochSet {
	i := 0
	for i < len(s.older) && s.older[i].epoch <= limit {
		i++
	}
	taken := append([]epochSet(nil), s.older[:i]...)
	s.older = append(s.older[:0], s.older[i:]...)
	if s.epoch <= limit && s.inflight.n > 0 {
		taken = append(taken, epochSet{s.epoch, s.inflight})
		s.inflight = s.newSet(s.inflight)
	}
	return taken
}

// uncount drops n in-flight keys of generation gen from inflightGens.
func (s *shard) uncount(gen uint64, n int) {
	if c := s.inflightGens[gen]; c > n {
		s.inflightGens[gen] = c - n
	} else {
		delete(s.inflightGens, gen)
	}
}

// addCommitted puts the keys of the committing sets, now durable, into
// their generations' filters (those still live at now), and keeps the sets
// (exact mode: for recentlyCommitted, then for reuse). It is Ring.Add key
// by key, with the generation looked up once per run of keys of one
// generation.
func (s *shard) addCommitted(now time.Time, exactMode bool, nshards int) error {
	var firstErr error
	oldest := s.ring.OldestLive(now)
	for _, es := range s.committing {
		var f filter.Filter
		gen, run := uint64(0), 0
		flush := func() {
			if run > 0 {
				s.uncount(gen, run)
			}
		}
		var pf filter.Prefetcher
		add := func(h uint64, en inflightEntry) {
			if run == 0 || en.gen != gen {
				flush()
				gen, run, f, pf = en.gen, 0, nil, nil
				if gen >= oldest {
					g, err := s.ring.Get(gen)
					if err != nil {
						if firstErr == nil {
							firstErr = err
						}
					} else {
						f = g.Filter
						pf, _ = f.(filter.Prefetcher)
					}
				}
			}
			run++
			if f != nil {
				f.Add(h)
			}
		}
		ents := es.set.ents
		for j, en := range ents {
			// Prefetch the key that comes prefetchAhead later, if it goes
			// to the same filter (runs of one generation are long).
			if k := j + prefetchAhead; pf != nil && k < len(ents) && ents[k].gen == gen {
				pf.Prefetch(ents[k].h)
			}
			add(en.h, en)
		}
		for _, en := range es.set.zero {
			add(0, en)
		}
		flush()
		if exactMode {
			s.remember(es.set, recentKeys/nshards)
		} else {
			s.recycle(es.set)
		}
	}
	return firstErr
}

// recentKeys bounds the committed keys an exact-mode engine keeps in
// memory, across shards, to answer their duplicates without a store lookup
// (about 100 bytes each, ~50 MB at the bound); recentSets bounds the sets a
// shard keeps (one per commit), since a lookup probes each. Duplicates come
// mostly soon after their first event, so the last few commits answer most
// of them.
const (
	recentKeys = 512 << 10
	recentSets = 8
)

// remember keeps p, a set just committed, in recent, dropping (for reuse)
// the oldest sets past recentSets or past maxKeys keys.
func (s *shard) remember(p *inflightSet, maxKeys int) {
	s.recent = append(s.recent, p)
	n := 0
	for _, r := range s.recent {
		n += r.n
	}
	drop := 0
	for drop < len(s.recent) && (len(s.recent)-drop > recentSets || n > maxKeys) {
		n -= s.recent[drop].n
		s.recycle(s.recent[drop])
		drop++
	}
	s.recent = append(s.recent[:0], s.recent[drop:]...)
}

// recentlyCommitted reports whether key (hash h) was committed by one of
// the shard's last commits into a generation still live: a Duplicate, with
// no store lookup.
func (s *shard) recentlyCommitted(h uint64, key []byte) bool {
	for i := len(s.recent) - 1; i >= 0; i-- {
		gen, ok := s.recent[i].lookup(h, key)
		if !ok {
			continue
		}
		for _, g := range s.ring.Generations() {
			if g.ID == gen {
				return true
			}
		}
		return false // expired: its store range is dropped, or will be
	}
	return false
}
