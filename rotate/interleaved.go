package rotate

import (
	"fmt"

	"github.com/streamdedup/dedup/filter"
)

// With Kind filter.Interleaved or filter.Wide the ring's generations share
// lane tables (filter.LaneTable, packed or wide layout): each table has N+1
// lanes, a generation's filter is a
// filter.LaneView of one lane, and a lookup asks every generation with one
// memory access per table instead of one per generation. An expired
// generation's lane is cleared in one pass over the table and taken by a
// later generation.
//
// Memory follows the traffic. The first table is sized from
// Options.Capacity. When a new generation starts, the keys its predecessor
// holds are the measure of the rate: if the current table's lanes are more
// than 3x too large for it plus half again of headroom, or too small for
// it, a new table sized for 1.5x the measure takes the new generations,
// and the old one is dropped when its last generation expires (lookups ask
// both meanwhile). A generation that outgrows its lane within its span
// chains an overflow filter (filter.LaneView), so a burst raises memory,
// not the error rate. The tables get (1 - 1/32) of the target between
// them, and each overflow 1/32 divided by N+1: with every lane at capacity
// and no overflow, a lookup meets (1 - 1/32) of the target, which is what
// the tables are sized for, not half of it.
type laneTables struct {
	lanes    int     // N+1
	wide     bool    // Kind filter.Wide: a whole line per lane
	fp       float64 // each table's target, across its lanes
	overFP   float64 // each overflow filter's target
	tables   []*laneTable
	current  *laneTable // where new generations go
	resized  int        // tables started for a measured rate
	minLanes uint64     // smallest capacity a resize asks for
	// young is the first generation of a fresh ring while it journals
	// its hashes (see youngStart); youngLimit is the capacity it may grow
	// to that way (Options.Capacity).
	young      *filter.LaneView
	youngLimit uint64
}

type laneTable struct {
	t    *filter.LaneTable
	used filter.LaneSet // lanes held by a live generation
}

// youngStart is the capacity of a fresh ring's first table when
// Options.Capacity is larger. The first generation keeps a journal of its
// hashes (8 bytes each) while it is the only one: when its lane fills, the
// table is rebuilt 2x larger from the journal, up to Options.Capacity, and
// when the second generation starts, the table is rebuilt once more for
// 1.5x the keys the first one holds and the journal is dropped. So from
// the first key on, memory follows the keys actually seen, and a rate
// over-estimated in ExpectedRate costs at most 2x the memory the keys need.
const youngStart = minLaneCapacity

// laneShare is the part of the target the overflow filters share.
const laneShare = 1.0 / 32

// minLaneCapacity bounds the capacity a resize asks for from below.
const minLaneCapacity = 1024

func newLaneTables(cfg Options) *laneTables {
	lanes := cfg.Generations + 1
	// The tables' sizing (k and keys per bucket for the target, cached
	// per target in package filter) takes up to ~30 ms to compute for a
	// new target: do it when the ring is made, not on its first key.
	_, _ = filter.EstimateLaneTableBytes(filter.LaneTableOptions{Lanes: lanes, Capacity: 1,
		FalsePositiveRate: cfg.FalsePositiveRate * (1 - laneShare), Wide: cfg.Kind == filter.Wide})
	return &laneTables{
		lanes:      lanes,
		wide:       cfg.Kind == filter.Wide,
		fp:         cfg.FalsePositiveRate * (1 - laneShare),
		overFP:     cfg.FalsePositiveRate * laneShare / float64(lanes),
		minLanes:   min(cfg.Capacity, minLaneCapacity),
		youngLimit: cfg.Capacity,
	}
}

// EstimateBytes returns the filter memory a ring of cfg holds when every
// generation holds Capacity keys: N+1 filters, or one lane table.
func EstimateBytes(cfg Options) (uint64, error) {
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	// Sized for the generations of the longest window.
	cfg.Generations, cfg.MaxWindow = cfg.sizedGenerations(), 0
	if cfg.Kind == filter.Interleaved {
		lt := newLaneTables(cfg)
		return filter.EstimateLaneTableBytes(filter.LaneTableOptions{Lanes: lt.lanes, Capacity: cfg.Capacity, FalsePositiveRate: lt.fp, Wide: lt.wide})
	}
	per, err := filter.EstimateBytes(cfg.Kind, cfg.Capacity, PerGenerationFP(cfg.FalsePositiveRate, cfg.Generations))
	if err != nil {
		return 0, err
	}
	return per * uint64(cfg.Generations+1), nil
}

// freeLane returns a table with a free lane and that lane: the current table
// if it has one, else another of its geometry, else a new one like it.
func (lt *laneTables) freeLane(like *filter.LaneTable) (*laneTable, int, error) {
	for _, c := range lt.tables {
		if c.t.SameGeometry(like) {
			for l := range lt.lanes {
				if !c.used.Has(l) {
					return c, l, nil
				}
			}
		}
	}
	t, err := filter.NewLaneTable(filter.LaneTableOptions{Lanes: lt.lanes, Capacity: like.Capacity(), FalsePositiveRate: like.TargetFP(), Wide: like.Wide()})
	if err != nil {
		return nil, 0, err
	}
	c := &laneTable{t: t}
	lt.tables = append(lt.tables, c)
	return c, 0, nil
}

// newGeneration returns a view of a free lane for a new generation.
// measured is the keys held by the newest generation before it (0 if
// none): the rate the lane should be sized for.
func (lt *laneTables) newGeneration(capacity, measured uint64) (*filter.LaneView, error) {
	if lt.current == nil {
		start := min(capacity, youngStart)
		t, err := filter.NewLaneTable(filter.LaneTableOptions{Lanes: lt.lanes, Capacity: start, FalsePositiveRate: lt.fp, Wide: lt.wide})
		if err != nil {
			return nil, err
		}
		lt.current = &laneTable{t: t, used: 1}
		lt.tables = append(lt.tables, lt.current)
		v, err := filter.NewLaneView(t, 0, lt.overFP)
		if err != nil {
			return nil, err
		}
		if start < capacity {
			v.StartJournal(lt.growYoung)
			lt.young = v
		}
		return v, nil
	}
	if lt.young != nil {
		if err := lt.settleYoung(); err != nil {
			return nil, err
		}
	} else if measured > 0 {
		want := lt.sizeFor(measured)
		have := lt.current.t.Capacity()
		// Outgrown by more than 1/16 (less is the overflow filter's job:
		// a generation's count wobbles), or 3x too large.
		if have+have/16 < measured || have > 3*want {
			t, err := filter.NewLaneTable(filter.LaneTableOptions{Lanes: lt.lanes, Capacity: want, FalsePositiveRate: lt.fp, Wide: lt.wide})
			if err != nil {
				return nil, err
			}
			lt.current = &laneTable{t: t}
			lt.tables = append(lt.tables, lt.current)
			lt.resized++
		}
	}
	c, l, err := lt.freeLane(lt.current.t)
	if err != nil {
		return nil, err
	}
	c.used |= 1 << l
	return filter.NewLaneView(c.t, l, lt.overFP)
}

// growYoung makes room in the young generation's full lane: it rebuilds
// the table 2x larger from the journal, or, past youngLimit, stops the
// journal (the lane overflows from then on) and reports false.
func (lt *laneTables) growYoung(v *filter.LaneView) bool {
	c := lt.current
	want := min(2*c.t.Capacity(), lt.youngLimit)
	if v != lt.young || want <= c.t.Capacity() {
		lt.stopYoung()
		return false
	}
	t, err := filter.NewLaneTable(filter.LaneTableOptions{Lanes: lt.lanes, Capacity: want, FalsePositiveRate: lt.fp, Wide: lt.wide})
	if err == nil {
		err = v.Regrow(t)
	}
	if err != nil {
		lt.stopYoung() // keep the lane as it is: it overflows instead
		return false
	}
	c.t = t
	return true
}

// settleYoung ends the first generation's journal when the second one
// starts: the table is rebuilt for 1.5x the keys it holds (unless it is
// about that already), so the generations that follow share a table
// sized from the rate seen.
func (lt *laneTables) settleYoung() error {
	v, c := lt.young, lt.current
	defer lt.stopYoung()
	n := v.Count()
	want := lt.sizeFor(n)
	if have := c.t.Capacity(); have >= want && have <= want+want/2 {
		return nil
	}
	t, err := filter.NewLaneTable(filter.LaneTableOptions{Lanes: lt.lanes, Capacity: want, FalsePositiveRate: lt.fp, Wide: lt.wide})
	if err != nil {
		return err
	}
	if err := v.Regrow(t); err != nil {
		return err
	}
	c.t = t
	lt.resized++
	return nil
}

// sizeFor returns the lane capacity for generations of about n keys (see
// the package's sizeFor).
func (lt *laneTables) sizeFor(n uint64) uint64 { return sizeFor(n, lt.youngLimit) }

func (lt *laneTables) stopYoung() {
	if lt.young != nil {
		lt.young.StopJournal()
		lt.young = nil
	}
}

// adopt places a restored lane (a view of a table of its own, from
// filter.Unmarshal) into a table of the ring with a free lane of its
// geometry, or makes its table one of the ring's.
func (lt *laneTables) adopt(v *filter.LaneView) error {
	for _, c := range lt.tables {
		if c.t == v.Table() {
			return nil // already ours: a generation Get created
		}
	}
	// A restored generation ends the first one's journal: the ring is no
	// longer fresh.
	lt.stopYoung()
	if v.Table().Lanes() != lt.lanes {
		return fmt.Errorf("rotate: restored lane of a %d-lane table, the ring has %d", v.Table().Lanes(), lt.lanes)
	}
	for _, c := range lt.tables {
		if !c.t.SameGeometry(v.Table()) {
			continue
		}
		for l := range lt.lanes {
			if !c.used.Has(l) {
				if err := v.MoveTo(c.t, l); err != nil {
					return err
				}
				c.used |= 1 << l
				return nil
			}
		}
	}
	c := &laneTable{t: v.Table(), used: 1 << v.Lane()}
	lt.tables = append(lt.tables, c)
	if lt.current == nil {
		lt.current = c
	}
	return nil
}

// release clears an expired generation's lane and drops tables no live
// generation uses any more (except the current one).
func (lt *laneTables) release(v *filter.LaneView) {
	if v == lt.young {
		lt.stopYoung()
	}
	for i, c := range lt.tables {
		if c.t != v.Table() {
			continue
		}
		c.t.ClearLane(v.Lane())
		c.used &^= 1 << v.Lane()
		if c.used == 0 && c != lt.current {
			lt.tables = append(lt.tables[:i], lt.tables[i+1:]...)
		}
		return
	}
}

// LaneTableStats describes the lane tables of an Interleaved ring.
type LaneTableStats struct {
	// Tables is the number of lane tables held (more than one while a
	// resized table takes over, or after an odd clock).
	Tables int
	// LaneCapacity is the keys per generation the current table is sized
	// for: the ring's estimate of the rate times the span.
	LaneCapacity uint64
	// Bytes is the memory of the tables (overflow filters not included).
	Bytes uint64
	// Resized counts tables started because the measured rate differed
	// from the current table's sizing.
	Resized int
}

// LaneTables describes the ring's lane tables; ok is false unless the
// ring's Kind is filter.Interleaved.
func (r *Ring) LaneTables() (s LaneTableStats, ok bool) {
	lt := r.lanes
	if lt == nil {
		return s, false
	}
	s.Tables, s.Resized = len(lt.tables), lt.resized
	if lt.current != nil {
		s.LaneCapacity = lt.current.t.Capacity()
	}
	for _, c := range lt.tables {
		s.Bytes += c.t.SizeBytes()
	}
	return s, true
}

// Probe sets maybe[j] to whether any live generation may hold
// hashes[group[j]], for every j. It asks the filters of all keys at once
// (filter.ProbeAll: blocked generations together, key by key; the others
// generation by generation; or lane table by lane table), prefetching
// ahead, so that the memory accesses of different keys overlap where
// asking key by key would wait for each in turn.
func (r *Ring) Probe(hashes []uint64, group []int32, maybe []bool) {
	maybe = maybe[:len(group)]
	clear(maybe)
	if r.lanes != nil {
		r.probeLanes(hashes, group, maybe)
		return
	}
	// Newest first: the generation a repeat most likely falls in.
	var fs [16]filter.Filter
	for lo := len(r.gens); lo > 0; lo -= len(fs) {
		n := 0
		for gi := lo - 1; gi >= 0 && n < len(fs); gi-- {
			fs[n] = r.gens[gi].Filter
			n++
		}
		filter.ProbeAll(fs[:n], hashes, group, maybe)
	}
}

// probeAhead is how many keys ahead Probe prefetches: enough misses in
// flight to cover DRAM latency, few enough that the lines are still
// cached when used.
const probeAhead = 12

func (r *Ring) probeLanes(hashes []uint64, group []int32, maybe []bool) {
	for _, c := range r.lanes.tables {
		if c.used == 0 {
			continue
		}
		t, used := c.t, c.used
		ahead := probeAhead
		for _, i := range group[:min(ahead, len(group))] {
			t.Prefetch(hashes[i])
		}
		for j, i := range group {
			if k := j + ahead; k < len(group) {
				t.Prefetch(hashes[group[k]])
			}
			maybe[j] = maybe[j] || t.TestIn(hashes[i], used) != 0
		}
	}
	for _, g := range r.gens {
		if over := g.Filter.(*filter.LaneView).Overflow(); over != nil {
			for j, i := range group {
				maybe[j] = maybe[j] || over.Test(hashes[i])
			}
		}
	}
}

// containsLanes is Contains for an Interleaved ring: one access per table.
func (r *Ring) containsLanes(h uint64) bool {
	return r.matchLanes(h)
}

func (r *Ring) matchLanes(h uint64) bool {
	for _, c := range r.lanes.tables {
		if c.t.TestIn(h, c.used) != 0 {
			return true
		}
	}
	for _, g := range r.gens {
		if over := g.Filter.(*filter.LaneView).Overflow(); over != nil && over.Test(h) {
			return true
		}
	}
	return false
}

// FilterBytes returns the memory held by the ring's filters: the sum of
// the generations' SizeBytes (and the first generation's journal while it
// keeps one), or for an Interleaved ring its lane tables (free lanes
// included) and its generations' overflow filters.
func (r *Ring) FilterBytes() uint64 {
	var n uint64
	if r.lanes == nil {
		for _, g := range r.gens {
			n += g.Filter.SizeBytes()
		}
		for _, g := range r.gens {
			n += journalBytes(g.Filter) // a young generation's journal, a Fuse ring's spool
		}
		return n
	}
	for _, c := range r.lanes.tables {
		n += c.t.SizeBytes()
	}
	for _, g := range r.gens {
		if over := g.Filter.(*filter.LaneView).Overflow(); over != nil {
			n += over.SizeBytes()
		}
	}
	return n
}
