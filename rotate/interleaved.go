package rotate

import (
	"fmt"

	"github.com/streamdedup/dedup/filter"
)

// With Kind filter.Interleaved the ring's generations share lane tables
// (filter.LaneTable): each table has N+1 lanes, a generation's filter is a
// filter.LaneView of one lane, and a lookup asks every generation with one
// memory access per table instead of one per generation. An expired
// generation's lane is cleared in one pass over the table and taken by a
// later generation.
//
// Memory follows the traffic. The first table is sized from
// Config.Capacity. When a new generation starts, the keys its predecessor
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
	fp       float64 // each table's target, across its lanes
	overFP   float64 // each overflow filter's target
	tables   []*laneTable
	current  *laneTable // where new generations go
	resized  int        // tables started for a measured rate
	minLanes uint64     // smallest capacity a resize asks for
	// Sampled probes (filter.Sampled) while every live generation's
	// shadow was complete: those no shadow held, and of them those the
	// tables matched anyway (false positives on real traffic).
	sampledNew, sampledFP uint64
}

type laneTable struct {
	t    *filter.LaneTable
	used filter.LaneSet // lanes held by a live generation
}

// laneShare is the part of the target the overflow filters share.
const laneShare = 1.0 / 32

// minLaneCapacity bounds the capacity a resize asks for from below.
const minLaneCapacity = 1024

func newLaneTables(cfg Config) *laneTables {
	lanes := cfg.Generations + 1
	return &laneTables{
		lanes:    lanes,
		fp:       cfg.FalsePositiveRate * (1 - laneShare),
		overFP:   cfg.FalsePositiveRate * laneShare / float64(lanes),
		minLanes: min(cfg.Capacity, minLaneCapacity),
	}
}

// EstimateBytes returns the filter memory a ring of cfg holds when every
// generation holds Capacity keys: N+1 filters, or one lane table.
func EstimateBytes(cfg Config) (uint64, error) {
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	if cfg.Kind == filter.Interleaved {
		lt := newLaneTables(cfg)
		return filter.EstimateLaneTableBytes(filter.LaneTableConfig{Lanes: lt.lanes, Capacity: cfg.Capacity, FalsePositiveRate: lt.fp})
	}
	per, err := filter.EstimateBytes(cfg.Kind, cfg.Capacity, cfg.FalsePositiveRate/float64(cfg.Generations+1))
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
	t, err := filter.NewLaneTable(filter.LaneTableConfig{Lanes: lt.lanes, Capacity: like.Capacity(), FalsePositiveRate: like.TargetFP()})
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
		t, err := filter.NewLaneTable(filter.LaneTableConfig{Lanes: lt.lanes, Capacity: capacity, FalsePositiveRate: lt.fp})
		if err != nil {
			return nil, err
		}
		lt.current = &laneTable{t: t}
		lt.tables = append(lt.tables, lt.current)
	} else if measured > 0 {
		want := max(lt.minLanes, measured+measured/2)
		have := lt.current.t.Capacity()
		if have < measured || have > 3*want {
			t, err := filter.NewLaneTable(filter.LaneTableConfig{Lanes: lt.lanes, Capacity: want, FalsePositiveRate: lt.fp})
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

// adopt places a restored lane (a view of a table of its own, from
// filter.Unmarshal) into a table of the ring with a free lane of its
// geometry, or makes its table one of the ring's.
func (lt *laneTables) adopt(v *filter.LaneView) error {
	if v.Table().Lanes() != lt.lanes {
		return fmt.Errorf("rotate: restored lane of a %d-lane table, the ring has %d", v.Table().Lanes(), lt.lanes)
	}
	for _, c := range lt.tables {
		if c.t == v.Table() {
			return nil // already ours
		}
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
// hashes[group[j]], for every j. It asks the filters of all keys at once,
// generation by generation (or lane table by lane table), prefetching
// ahead, so that the memory accesses of different keys overlap where
// asking key by key would wait for each in turn.
func (r *Ring) Probe(hashes []uint64, group []int32, maybe []bool) {
	maybe = maybe[:len(group)]
	clear(maybe)
	if r.lanes != nil {
		r.probeLanes(hashes, group, maybe)
		return
	}
	for gi := len(r.gens) - 1; gi >= 0; gi-- {
		f := r.gens[gi].Filter
		pf, _ := f.(filter.Prefetcher)
		if pf != nil {
			for _, i := range group[:min(probeAhead, len(group))] {
				pf.Prefetch(hashes[i])
			}
		}
		for j, i := range group {
			if k := j + probeAhead; pf != nil && k < len(group) {
				pf.Prefetch(hashes[group[k]])
			}
			maybe[j] = maybe[j] || f.Test(hashes[i])
		}
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
		for _, i := range group[:min(probeAhead, len(group))] {
			t.Prefetch(hashes[i])
		}
		for j, i := range group {
			if k := j + probeAhead; k < len(group) {
				t.Prefetch(hashes[group[k]])
			}
			maybe[j] = maybe[j] || t.Test(hashes[i])&used != 0
		}
	}
	for _, g := range r.gens {
		if over := g.Filter.(*filter.LaneView).Overflow(); over != nil {
			for j, i := range group {
				maybe[j] = maybe[j] || over.Test(hashes[i])
			}
		}
	}
	for j, i := range group {
		if filter.Sampled(hashes[i]) {
			r.sample(hashes[i], maybe[j])
		}
	}
}

// sample counts a probe of the sampled hash h that the filters answered
// maybe: a new key if no live generation's shadow holds it, and then a
// false positive if maybe. Nothing is counted while a shadow is
// incomplete (a restored generation is live).
func (r *Ring) sample(h uint64, maybe bool) {
	for _, g := range r.gens {
		held, complete := g.Filter.(*filter.LaneView).ShadowHolds(h)
		if held || !complete {
			return
		}
	}
	r.lanes.sampledNew++
	if maybe {
		r.lanes.sampledFP++
	}
}

// ObservedFP returns, for an Interleaved ring, the probes of sampled
// hashes (1/1024 of the hash space, filter.Sampled) that no live
// generation held, and how many of them the filters matched anyway: the
// false-positive rate measured on the traffic itself is fp/probes. Zero
// for other kinds, and while a restored generation is live.
func (r *Ring) ObservedFP() (probes, fp uint64) {
	if r.lanes == nil {
		return 0, 0
	}
	return r.lanes.sampledNew, r.lanes.sampledFP
}

// containsLanes is Contains for an Interleaved ring: one access per table.
func (r *Ring) containsLanes(h uint64) bool {
	found := r.matchLanes(h)
	if filter.Sampled(h) {
		r.sample(h, found)
	}
	return found
}

func (r *Ring) matchLanes(h uint64) bool {
	for _, c := range r.lanes.tables {
		if c.t.Test(h)&c.used != 0 {
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

// measuredBefore returns the keys held by the newest live generation
// older than id, 0 if none.
func (r *Ring) measuredBefore(id uint64) uint64 {
	for i := len(r.gens) - 1; i >= 0; i-- {
		if r.gens[i].ID < id {
			return r.gens[i].Filter.Count()
		}
	}
	return 0
}

// FilterBytes returns the memory held by the ring's filters: the sum of
// the generations' SizeBytes, or for an Interleaved ring its lane tables
// (free lanes included) and its generations' overflow filters.
func (r *Ring) FilterBytes() uint64 {
	var n uint64
	if r.lanes == nil {
		for _, g := range r.gens {
			n += g.Filter.SizeBytes()
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

// SizedCapacity returns the keys a new generation's filter is sized for:
// Config.Capacity, or for an Interleaved ring the lanes of its current
// table (resized to the measured rate).
func (r *Ring) SizedCapacity() uint64 {
	if r.lanes != nil && r.lanes.current != nil {
		return r.lanes.current.t.Capacity()
	}
	return r.cfg.Capacity
}
