package dedup

import (
	"slices"
	"sync"
	"time"

	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/advisor"
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
	inflight *inflightSet
	epoch    uint64
	// undone holds, under Options.ExplicitDone, the keys observed New and
	// not yet Done: they answer InFlight and no commit takes them; Done
	// moves a key into inflight, Forget removes it. nil otherwise.
	undone     *inflightSet
	older      []epochSet
	committing []epochSet
	// spare holds emptied sets for reuse, so that their tables are not
	// allocated (and collected) anew at every epoch; a commit that finds
	// the shard idle drops them (see idle).
	spare []*inflightSet
	// recent holds, in exact mode, compact copies of the newest keys of
	// the last commits, oldest first: keys known durable, so that a
	// duplicate of one answers without a store lookup (see
	// recentlyCommitted). They take recentBytes, at most budget, the
	// shard's share of the cache budget (see recentBudget), set by the
	// commit leader under mu, and at most recentSets sets, since a lookup
	// probes each. recentFree is the set last dropped from recent, whose
	// arrays the next one reuses, and freeBytes its size: only the commit
	// leader uses recentFree, with or without mu (it compacts the sets it
	// commits outside mu).
	recent      []*recentSet
	recentBytes uint64
	recentFree  *recentSet
	freeBytes   uint64
	budget      int
	// renew holds, under Options.Refresh, the renewals the next commit
	// writes, renewing those a commit is writing (refresh.go).
	renew    *inflightSet
	renewing []*inflightSet
	// inflightGens counts the keys in flight per generation: a past
	// generation with none can never change again (it is final).
	inflightGens map[uint64]int

	// shadow holds the sampled hashes committed into live generations,
	// with their generation, for the observed false-positive rate (see
	// shadow.go); shadowFrom is the first generation whose keys it all
	// holds (past those restored from a snapshot), shadowPruned the oldest
	// live generation at its last pruning.
	shadow                   map[uint64]uint64
	shadowFrom, shadowPruned uint64

	// adv is the shard's part of the window advisor (internal/advisor).
	// noAdvice turns it and the observed-FP shadow off: a benchmark's
	// baseline (export_test.go); they are always on otherwise.
	adv      *advisor.Shard
	noAdvice bool

	// Counters for Stats.
	observed, news, dups, inflightHits uint64
	falsePositives, lookups            uint64
	sampledNew, sampledFP              uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// epochSet is the keys in flight of one epoch of one shard.
type epochSet struct {
	epoch uint64
	set   *inflightSet
}

// rollEpoch starts epoch cur in s, as roll does, and gives the set that
// takes the keys of the epoch a table (see prepare): the shard is in use.
func (s *shard) rollEpoch(cur uint64) {
	s.roll(cur)
	if s.inflight.hashes == nil {
		s.prepare()
	}
}

// roll starts epoch cur in s: the keys in flight of the previous epoch
// move to older.
func (s *shard) roll(cur uint64) {
	if cur == s.epoch {
		return
	}
	if s.inflight.n > 0 {
		s.older = append(s.older, epochSet{s.epoch, s.inflight})
		s.inflight = newSet(s.inflight)
	}
	s.epoch = cur
}

// newSet returns an empty in-flight set with no table yet, to hold as many
// keys as like, the set it replaces: prepare gives it one when the shard
// is next used, so that a shard without keys holds no table for them.
func newSet(like *inflightSet) *inflightSet {
	return &inflightSet{hint: like.n, arenaHint: len(like.arena)}
}

// prepare gives s.inflight, which has no table, a spare's, sized for its
// hint (growing it on the observe path would copy it).
func (s *shard) prepare() {
	p := s.inflight
	if n := len(s.spare); n > 0 {
		q := s.spare[n-1]
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
		q.hint, q.arenaHint = p.hint, p.arenaHint
		p = q
	}
	p.init(p.hint, p.arenaHint)
	s.inflight = p
}

// maxSpare bounds the spare sets a shard keeps: one per epoch a commit
// takes (two when commits follow Barriers).
const maxSpare = 2

// minSpareBytes is the smallest set recycle keeps: a smaller one costs
// less to allocate anew (a few microseconds per shard and commit) than to
// hold between commits.
const minSpareBytes = 64 << 10

// recycle keeps p, which nothing refers to any more, for reuse, if it is
// large enough for reuse to matter.
func (s *shard) recycle(p *inflightSet) {
	if len(s.spare) < maxSpare && p.bytes() >= minSpareBytes {
		s.spare = append(s.spare, p)
	}
}

// idle releases what s keeps for keys to come, when a commit finds it
// with no key in flight and none to commit, a whole commit interval
// without a new key: the spare sets, the empty set's table and the
// arrays kept for the cache's next set. A shard that gets keys again
// allocates them anew. Keys Done or not (undone) are left alone.
func (s *shard) idle() {
	clear(s.spare)
	s.spare = s.spare[:0]
	if s.inflight.hashes != nil {
		s.inflight = &inflightSet{}
	}
	s.recentFree, s.freeBytes = nil, 0
}

// inFlight reports whether key (hash h) is in flight (Done or not) or being
// committed.
func (s *shard) inFlight(h uint64, key []byte, exactMode bool) bool {
	return s.undone.has(h, key, exactMode) || s.doneInFlight(h, key, exactMode)
}

// doneInFlight reports whether key (hash h) is in flight and Done (every
// key in flight, without ExplicitDone) or being committed.
func (s *shard) doneInFlight(h uint64, key []byte, exactMode bool) bool {
	return s.inflight.has(h, key, exactMode) || hasIn(s.older, h, key, exactMode) || hasIn(s.committing, h, key, exactMode)
}

// otherInFlight is inFlight without the set newKeys returns: the sets a
// key observed now cannot join.
func (s *shard) otherInFlight(h uint64, key []byte, exactMode bool) bool {
	if s.undone != nil {
		return s.doneInFlight(h, key, exactMode)
	}
	return hasIn(s.older, h, key, exactMode) || hasIn(s.committing, h, key, exactMode)
}

// newKeys returns the set a key observed New joins: undone under
// ExplicitDone, until Done; inflight otherwise.
func (s *shard) newKeys() *inflightSet {
	if s.undone != nil {
		return s.undone
	}
	return s.inflight
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
		s.inflight = newSet(s.inflight)
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
// their generations' filters (those still live at now), keeps fresh, the
// compact copies of their newest keys (exact mode, see compactCommitted),
// for recentlyCommitted, and keeps the sets for reuse. It is Ring.Add key
// by key, with the generation looked up once per run of keys of one
// generation.
func (s *shard) addCommitted(now time.Time, fresh []*recentSet) error {
	var firstErr error
	oldest := s.ring.OldestLive(now)
	s.pruneShadow(oldest)
	for _, es := range s.committing {
		ents := es.set.ents
		for lo := 0; lo < len(ents); {
			hi := lo + 1
			for hi < len(ents) && ents[hi].gen == ents[lo].gen {
				hi++
			}
			if err := s.addRun(ents[lo:hi], oldest); err != nil && firstErr == nil {
				firstErr = err
			}
			lo = hi
		}
		for i := range es.set.zero {
			if err := s.addRun(es.set.zero[i:i+1], oldest); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		s.recycle(es.set)
	}
	for _, r := range fresh {
		s.remember(r)
	}
	// The arrays kept for the next set count against the budget: drop
	// them when the cache fills it.
	if s.recentFree == nil || s.recentBytes+s.freeBytes > uint64(max(s.budget, 0)) {
		s.recentFree, s.freeBytes = nil, 0
	}
	return firstErr
}

// addRun puts run, committed keys of one generation, into that
// generation's filter if it is live (oldest and after), and its sampled
// hashes into the shadow, through filter.AddAll in chunks.
func (s *shard) addRun(run []inflightEntry, oldest uint64) error {
	gen := run[0].gen
	s.uncount(gen, len(run))
	var g *rotate.Generation
	if gen >= oldest {
		var err error
		if g, err = s.ring.Get(gen); err != nil {
			return err
		}
	}
	// Expired before its commit, a run goes into no filter; the advisor's
	// horizon still takes its sample.
	var buf [512]uint64
	for len(run) > 0 {
		n := min(len(run), len(buf))
		for i, en := range run[:n] {
			buf[i] = en.h
			if g != nil && sampled(en.h) && !s.noAdvice {
				s.shadowAdd(en.h, gen)
			}
		}
		if g != nil {
			filter.AddAll(g.Filter, buf[:n])
		}
		if !s.noAdvice {
			s.adv.Committed(gen, buf[:n])
		}
		run = run[n:]
	}
	return nil
}

// recentSets bounds the sets of recent commits a shard keeps, since a
// lookup probes each.
const recentSets = 8

// recentShare is the cache's budget as a share of the filters' memory
// (see recentBudget).
const recentShare = 8

// recentBudget is the memory the cache of recently committed keys may
// take in a shard whose filters hold filterBytes now: an eighth of it
// (at least recentFloor), the arrays kept for the next set (recentFree)
// included. The
// cache saves a store lookup for each duplicate of a key of the last
// commits; its keys cost ~11 bytes each besides their own bytes, about
// 15 times a key's share of the filters, so it holds about 1% of the
// window's keys, or the keys of recentSets commits if fewer.
func recentBudget(filterBytes uint64) int {
	return int(min(max(filterBytes/recentShare, recentFloor), 1<<40))
}

// recentFloor is the least budget of a shard's cache: a new state's
// filters hold nothing yet, and a few KiB keep the last commit's newest
// keys (about 150 of 16 bytes).
const recentFloor = 4 << 10

// recentBytesFor is the memory a recentSet of the keys of p takes.
func recentBytesFor(p *inflightSet) int {
	return recentSetSize + 3*4 + p.n*recentEntryBytes + p.live
}

// makeRoom drops the oldest sets of recent to make room, within the
// shard's budget and recentSets, for compact copies of the committing
// sets, and keeps the last one dropped in recentFree for its arrays. It
// runs before the commit writes, so the cache may miss the keys dropped
// a little early: the store answers them.
func (s *shard) makeRoom() {
	need := 0
	for _, es := range s.committing {
		need += recentBytesFor(es.set)
	}
	need = min(need, s.budget)
	drop := 0
	for drop < len(s.recent) && (len(s.recent)-drop+len(s.committing) > recentSets || int(s.recentBytes)+need > s.budget) {
		old := s.recent[drop]
		s.recentBytes -= old.bytes()
		s.recentFree, s.freeBytes = old, old.bytes()
		drop++
	}
	n := copy(s.recent, s.recent[drop:])
	clear(s.recent[n:])
	s.recent = s.recent[:n]
}

// compactCommitted returns compact copies of the newest keys of the
// committing sets, oldest first, within the room makeRoom made: what
// addCommitted keeps in recent. Only the commit leader calls it, without
// mu: it reads the committing sets, which nothing writes meanwhile,
// recentFree and the leader's own fields.
func (s *shard) compactCommitted() []*recentSet {
	var fresh []*recentSet
	left := s.budget - int(s.recentBytes)
	for i := len(s.committing) - 1; i >= 0 && left > 0; i-- {
		r := compactRecent(s.recentFree, s.committing[i].set, left)
		if r == nil {
			break
		}
		if r == s.recentFree {
			// freeBytes, which Stats reads under mu, is reset by
			// addCommitted under mu.
			s.recentFree = nil
			if int(r.bytes()) > left {
				// The reused arrays are larger than the keys need (up
				// to twice): lay the keys out in arrays of their size.
				r = compactRecent(nil, s.committing[i].set, left)
				if r == nil {
					break
				}
			}
		}
		left -= int(r.bytes())
		fresh = append(fresh, r)
	}
	slices.Reverse(fresh)
	return fresh
}

// remember keeps r, the newest keys of a set just committed, in recent,
// dropping the oldest sets if r took more room than makeRoom made.
func (s *shard) remember(r *recentSet) {
	s.recent = append(s.recent, r)
	s.recentBytes += r.bytes()
	drop := 0
	for drop < len(s.recent)-1 && (len(s.recent)-drop > recentSets || s.recentBytes > uint64(s.budget)) {
		s.recentBytes -= s.recent[drop].bytes()
		drop++
	}
	n := copy(s.recent, s.recent[drop:])
	clear(s.recent[n:])
	s.recent = s.recent[:n]
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

// filterBytes is the memory the shard's filters hold now, which the
// cache's budget follows (see recentBudget): filters that grow with the
// keys held give a cache that grows with them too.
func (s *shard) filterBytes() uint64 {
	return s.ring.FilterBytes()
}

// inflightBytes is the memory the shard's in-flight sets take, spares
// included.
func (s *shard) inflightBytes() uint64 {
	n := s.inflight.bytes() + s.undone.bytes()
	for _, sets := range [][]epochSet{s.older, s.committing} {
		for _, es := range sets {
			n += es.set.bytes()
		}
	}
	for _, p := range s.spare {
		n += p.bytes()
	}
	return n
}
