package rotate

import (
	"github.com/streamdedup/dedup/filter"
)

// Memory that follows the traffic, for the chained kinds (bloom, cuckoo,
// blocked); the interleaved kind does the same with its lane tables
// (interleaved.go), and both size generations with sizeFor.
//
// The first generation of a fresh ring starts at youngStart keys and keeps
// a journal of its hashes (filter.Regrower): when its filter is full it is
// rebuilt twice as large from the journal, so it stays one filter at its
// full target, holding between 1x and 2x the keys seen. The journal stops
// once the second generation has started (the first is then rebuilt for
// the keys it holds, plus an eighth, if it is much larger), or when it
// would outgrow an eighth of the memory a filter sized for
// Options.Capacity takes (youngBudget). The filter is then rebuilt once
// more: for the rate seen so far, projected to the end of the generation
// with half again of headroom, if that is within trustRate of the
// configured one (which it confirms: a ring told the right rate never
// holds more than it would have allocated up front) or the kind is
// cuckoo; otherwise twice as large, chaining past that, each growth link
// as large as the chain before it (filter.Regrower's ChainOnStop). A rate far over the configured one, measured over the first
// moments of a generation (a file read at a million lines a second, a
// client's burst), projects a rate the window never holds: memory
// follows the keys held instead, within 4x of what one filter sized
// for them at the target takes (TestMemoryFollowsKeys), the journal (8
// bytes a key, at most an eighth of a filter for Options.Capacity) on top
// while it lasts.
//
// Every later generation is sized by sizeFor from the keys the one before
// it holds (scaled to a whole span if the ring saw only the end of it):
// half again of the measure, or Options.Capacity if that holds the measure.
// A generation that outgrows its filter chains (the first growth link a
// quarter of it), so a burst raises memory, not the error rate.

// sizing is a Ring's state for memory that follows the traffic.
type sizing struct {
	// young is the first generation of a fresh ring while it journals
	// (chained kinds).
	young *Generation
	// firstID and firstFrom: the first generation of a fresh ring, and the
	// clock (ns) from which the ring saw it (its start, unless the ring
	// began inside it). first is false before any.
	first     bool
	firstID   uint64
	firstFrom int64
	// sized is the capacity the newest generation made was sized for.
	sized uint64
	// settle asks the next Advance to settle the young generation.
	settle bool
}

// youngBudget is the share of the memory of a filter sized for
// Options.Capacity that the first generation's journal may take. Small, so
// that a ring told about the right rate stops journaling (and replaying
// the journal into larger filters: 2-3x the journal's keys in inserts)
// early: at 1/8 the journal holds at most about Capacity/37 keys (a
// blocked filter takes 1.74 bytes a key at 1%, N = 4), so the first
// generation costs 4-8% more inserts.
const youngBudget = 1.0 / 8

// headroom: generations are sized for 1 + 1/headroomDiv times the measure.
const headroomDiv = 2

// sizeFor returns the capacity for generations of about n keys when the
// configured capacity is capacity: half again of n (at least the smaller
// of capacity and minLaneCapacity), or capacity if that is smaller and
// holds n to within 1/16 (a correctly set rate, which has its own
// headroom, is kept: overflow filters absorb the wobble).
func sizeFor(n, capacity uint64) uint64 {
	want := max(min(capacity, minLaneCapacity), n+n/headroomDiv)
	if capacity+capacity/16 >= n {
		want = min(want, capacity)
	}
	return want
}

// startYoung notes g as the first generation of a fresh ring, and makes it
// journal if it starts smaller than Options.Capacity.
func (r *Ring) startYoung(g *Generation) {
	from := r.now
	if start, end := int64(g.ID)*r.span, int64(g.ID+1)*r.span; from <= start || from >= end {
		from = start
	}
	r.sizing.first, r.sizing.firstID, r.sizing.firstFrom = true, g.ID, from
	rg, ok := g.Filter.(filter.Regrower)
	if !ok || g.Filter.Capacity() >= r.cfg.Capacity {
		return
	}
	grow := func(keys uint64) (uint64, bool) { return r.growYoung(g, keys) }
	if rg.StartJournal(grow) == nil {
		r.sizing.young = g
	}
}

// newChained returns the filter of a new generation id of a chained kind.
func (r *Ring) newChained(id uint64) (filter.Filter, error) {
	c := r.cfg.Capacity
	var want uint64
	switch {
	case len(r.gens) == 0:
		want = min(c, youngStart)
	default:
		if g := r.sizing.young; g != nil {
			if id > g.ID+1 {
				r.settleYoung()
			} else {
				r.sizing.settle = true // at the next Advance: see settleYoung
			}
		}
		want = c
		if m := r.measuredBefore(id); m > 0 {
			want = sizeFor(m, c)
		}
	}
	var f filter.Filter
	var err error
	if r.fuse != nil {
		f, err = r.newFuseActive(id, want)
	} else {
		f, err = filter.New(r.cfg.Kind, want, r.perGen)
	}
	if err != nil {
		return nil, err
	}
	r.sizing.sized = want
	return f, nil
}

// growYoung is the young generation g's answer when its filter is full
// with keys keys: the capacity to rebuild it at, and whether to keep the
// journal.
func (r *Ring) growYoung(g *Generation, keys uint64) (uint64, bool) {
	c := r.cfg.Capacity
	have := g.Filter.Capacity()
	next := min(2*have, c)
	if g != r.sizing.young || next <= have {
		r.sizing.young = nil
		return 0, false
	}
	budget, err := filter.EstimateBytes(r.cfg.Kind, c, r.perGen)
	if err != nil || float64(8*next) <= youngBudget*float64(budget) {
		r.sizing.sized = next
		return next, true
	}
	// The journal would outgrow its budget. If the rate seen confirms the
	// one configured (projected to the end of the generation it is within
	// trustRate of Options.Capacity), the filter is rebuilt for it, as it
	// would have been allocated up front. Otherwise the configured rate is
	// evidently wrong and the rate seen, over the first moments of a
	// generation (a file read at a million lines a second, a client's
	// burst), says nothing of the keys the rest of it holds: the filter is
	// rebuilt once more at next and chains from there, growth links as
	// large as the chain before them (see filter.Regrower), so that memory
	// follows the keys that come.
	want := next
	if p := r.project(g, keys); p <= trustRate*c || r.cfg.Kind == filter.Cuckoo {
		// Cuckoo links cost twice the bytes per key at each halving of
		// their target: it keeps one filter for the projection.
		want = min(c, max(next, sizeFor(p, c)))
	} else {
		g.Filter.(filter.Regrower).ChainOnStop()
	}
	r.sizing.young, r.sizing.sized = nil, want
	return want, false
}

// trustRate bounds the projection of the rate a young generation sees, as
// a multiple of Options.Capacity, within which it confirms the configured
// rate (see growYoung).
const trustRate = 2

// project returns the keys generation g, holding n, will hold at its end at
// the rate seen since the ring saw it start, at most maxProjection (which
// it is if no time has passed).
func (r *Ring) project(g *Generation, n uint64) uint64 {
	from, end := r.sizing.firstFrom, int64(g.ID+1)*r.span
	if r.now >= end {
		return n
	}
	if r.now <= from {
		return maxProjection
	}
	return uint64(min(float64(n)*float64(end-from)/float64(r.now-from), maxProjection))
}

// maxProjection bounds project's result, so that sizing arithmetic on it
// cannot overflow (filters hold at most 2^48 keys anyway).
const maxProjection = 1 << 48

// settleYoung ends the young generation's journal once the next one has
// started, at the first Advance after that (the commit that made the next
// generation also holds keys of the young one, in its random order, not
// last: they are in by then): it holds about all the keys it will, so it is
// rebuilt for those plus an eighth, if it is larger than that by a
// quarter.
func (r *Ring) settleYoung() {
	r.sizing.settle = false
	g := r.sizing.young
	if g == nil {
		return
	}
	r.sizing.young = nil
	rg := g.Filter.(filter.Regrower)
	if !rg.Journaling() {
		return
	}
	n := g.Filter.Count()
	want := max(n+n/8, min(r.cfg.Capacity, minLaneCapacity))
	if g.Filter.Capacity() > want+want/4 {
		_ = rg.Regrow(want) // on error the filter is kept as it is
	}
	rg.StopJournal()
}

// stopYoung ends the young generation's journal as it is.
func (r *Ring) stopYoung() {
	if g := r.sizing.young; g != nil {
		g.Filter.(filter.Regrower).StopJournal()
		r.sizing.young = nil
	}
}

// measuredBefore returns the keys held by the newest live generation
// older than id, 0 if none: the measure of the rate a generation should be
// sized for. A fresh ring's first generation, seen only from firstFrom on,
// is scaled to its whole span (at most to Options.Capacity, or its count).
func (r *Ring) measuredBefore(id uint64) uint64 {
	for i := len(r.gens) - 1; i >= 0; i-- {
		g := r.gens[i]
		if g.ID >= id {
			continue
		}
		n := g.Filter.Count()
		s := &r.sizing
		if start, end := int64(g.ID)*r.span, int64(g.ID+1)*r.span; s.first && g.ID == s.firstID && s.firstFrom > start {
			scaled := float64(n) * float64(r.span) / float64(end-s.firstFrom)
			n = uint64(min(scaled, float64(max(n, r.cfg.Capacity))))
		}
		return n
	}
	return 0
}

// SizedCapacity returns the keys a new generation's filter is sized for:
// the capacity the newest generation was made with (the young one's as it
// grows; a restored one's capacity), or for an Interleaved ring the lanes
// of its current table; Options.Capacity before any.
func (r *Ring) SizedCapacity() uint64 {
	if r.lanes != nil {
		if r.lanes.current != nil {
			return r.lanes.current.t.Capacity()
		}
		return r.cfg.Capacity
	}
	if g := r.sizing.young; g != nil {
		return g.Filter.Capacity()
	}
	if r.sizing.sized > 0 {
		return r.sizing.sized
	}
	if len(r.gens) > 0 { // restored: the newest generation's own sizing
		return r.gens[len(r.gens)-1].Filter.Capacity()
	}
	return r.cfg.Capacity
}
