package filter

import (
	"fmt"
	"math"
)

// Growth parameters of the scalable construction (Almeida, Baquero, Preguiça
// and Hutchison, "Scalable Bloom Filters", 2007). Link i holds
// capacity*growth^i keys at a target of fp*(1-r)*r^i, r the tightening
// ratio; the targets sum to fp, so the compound rate stays below fp however
// far the chain grows. Both are recorded in the encoding.
//
// New uses r = 1/4: the first link, the only one of a filter sized for its
// load, gets 3/4 of the target (1/2 with the paper's r = 1/2 would cost it
// about 0.8 more bits per key for an error rate nobody asked for); a link
// added by growth gets a quarter of the previous one's target, about 2 more
// bits per key. Unmarshal accepts any ratio in (0, 1).
const (
	growth  = 2
	tighten = 0.25
)

// maxCapacity bounds New's capacity argument (2^48 keys).
const maxCapacity = 1 << 48

// maxLinkBytes bounds the table New allocates for the first link (1 TiB):
// larger requests are mistakes, reported instead of attempted. Growth is not
// bounded: past the backends' own index limits (2^32 cuckoo buckets, 2^32
// blocked blocks) a new link is capped and holds fewer keys, so the chain
// grows more often, at the same targets.
const maxLinkBytes = 1 << 40

// link is one fixed-size filter of a chain.
type link interface {
	test(h uint64) bool
	// testOrAdd inserts h unless test(h) already holds, and reports test(h).
	testOrAdd(h uint64) bool
	count() uint64
	capacity() uint64
	full() bool
	sizeBytes() uint64
	fpRate() float64
}

// chain is the growable filter New returns: links, oldest first; inserts go
// into the newest.
type chain struct {
	kind  Kind
	cap0  uint64  // capacity asked of New: link 0's nominal capacity
	fp    float64 // compound target
	r     float64 // tightening ratio
	links []link
}

// New returns an empty growable filter of the given kind for capacity
// distinct hashes at false-positive rate fp, with 1 <= capacity <= 2^48 and
// 0 < fp < 1.
//
// The filter is a chain of fixed-size filters. The first is sized for
// capacity keys at 3fp/4; when the newest is full, the next insert chains a
// new one with twice the capacity and a quarter of the target, so the estimated
// compound rate stays at or below fp forever and memory grows with the data.
// Test checks every link, so a chain that has grown k times costs k+1
// lookups on a miss: size capacity for the expected load.
func New(kind Kind, capacity uint64, fp float64) (Filter, error) {
	if kind == Interleaved {
		if err := validate(Blocked, capacity, fp); err != nil {
			return nil, err
		}
		return newLaneFilter(capacity, fp)
	}
	if err := validate(kind, capacity, fp); err != nil {
		return nil, err
	}
	first := linkTarget(fp, tighten, 0)
	if b, limit := linkBytes(kind, capacity, first), linkLimit(kind); b > float64(limit) {
		return nil, fmt.Errorf("filter: capacity %d at fp %g needs %.0f bytes of %s table, over its %d limit", capacity, fp, b, kind, limit)
	}
	c := &chain{kind: kind, cap0: capacity, fp: fp, r: tighten}
	c.links = []link{newLink(kind, capacity, first)}
	return c, nil
}

// EstimateBytes returns the table memory New(kind, capacity, fp) allocates,
// before any growth.
func EstimateBytes(kind Kind, capacity uint64, fp float64) (uint64, error) {
	if kind == Interleaved {
		if err := validate(Blocked, capacity, fp); err != nil {
			return 0, err
		}
		return EstimateLaneTableBytes(LaneTableConfig{Lanes: 1, Capacity: capacity, FalsePositiveRate: fp * (1 - overflowShare)})
	}
	if err := validate(kind, capacity, fp); err != nil {
		return 0, err
	}
	b := linkBytes(kind, capacity, linkTarget(fp, tighten, 0))
	if limit := linkLimit(kind); b > float64(limit) {
		return 0, fmt.Errorf("filter: capacity %d at fp %g needs %.0f bytes of %s table, over its %d limit", capacity, fp, b, kind, limit)
	}
	return uint64(b), nil
}

func validate(kind Kind, capacity uint64, fp float64) error {
	switch kind {
	case Bloom, Cuckoo, Blocked:
	default:
		return fmt.Errorf("filter: kind: unknown %s", kind)
	}
	if capacity < 1 || capacity > maxCapacity {
		return fmt.Errorf("filter: capacity: must be in [1, 2^48], got %d", capacity)
	}
	if !(fp > 0 && fp < 1) {
		return fmt.Errorf("filter: fp: must be in (0, 1), got %g", fp)
	}
	return nil
}

// linkTarget returns the false-positive target of link i for tightening
// ratio r.
func linkTarget(fp, r float64, i int) float64 {
	return fp * (1 - r) * math.Pow(r, float64(i))
}

// linkCapacity returns the nominal capacity of link i (saturating).
func linkCapacity(cap0 uint64, i int) uint64 {
	c := cap0
	for range i {
		if c > math.MaxUint64/growth {
			return math.MaxUint64
		}
		c *= growth
	}
	return c
}

func newLink(kind Kind, capacity uint64, fp float64) link {
	switch kind {
	case Bloom:
		return newBloom(capacity, fp)
	case Cuckoo:
		return newCuckoo(capacity, fp)
	case Blocked:
		return newBlocked(capacity, fp)
	}
	panic("filter: unknown kind " + kind.String())
}

// linkBytes returns the table size of a link (as a float: absurd requests
// must not overflow).
func linkBytes(kind Kind, capacity uint64, fp float64) float64 {
	switch kind {
	case Bloom:
		return bloomBytes(capacity, fp)
	case Cuckoo:
		return cuckooBytes(capacity, fp)
	case Blocked:
		return blockedBytes(capacity, fp)
	}
	return 0
}

// linkLimit returns the largest table New accepts for a kind: maxLinkBytes,
// or less where the backend's indexing caps it.
func linkLimit(kind Kind) uint64 {
	switch kind {
	case Cuckoo:
		return maxCuckooSlots
	case Blocked:
		return maxBlocks * blockBytes
	}
	return maxLinkBytes
}

// grow chains a new link and returns it.
func (c *chain) grow() link {
	i := len(c.links)
	l := newLink(c.kind, linkCapacity(c.cap0, i), linkTarget(c.fp, c.r, i))
	c.links = append(c.links, l)
	return l
}

func (c *chain) Test(h uint64) bool {
	for i := len(c.links) - 1; i >= 0; i-- {
		if c.links[i].test(h) {
			return true
		}
	}
	return false
}

func (c *chain) TestOrAdd(h uint64) bool {
	n := len(c.links) - 1
	for _, l := range c.links[:n] {
		if l.test(h) {
			return true
		}
	}
	last := c.links[n]
	if last.full() {
		if last.test(h) {
			return true
		}
		last = c.grow()
	}
	return last.testOrAdd(h)
}

// Add inserts h. A hash that already tests true is not inserted again (it
// holds already), so Count counts distinct inserts and a chain link never
// fills with duplicates.
func (c *chain) Add(h uint64) { c.TestOrAdd(h) }

// Prefetch implements Prefetcher for the blocked backend (its newest link:
// the one inserts go to and tests ask first); other backends do nothing.
func (c *chain) Prefetch(h uint64) {
	if b, ok := c.links[len(c.links)-1].(*blocked); ok {
		b.prefetch(h)
	}
}

func (c *chain) Count() uint64 {
	var n uint64
	for _, l := range c.links {
		n += l.count()
	}
	return n
}

func (c *chain) Capacity() uint64 {
	var n uint64
	for _, l := range c.links {
		n += l.capacity()
	}
	return n
}

func (c *chain) SizeBytes() uint64 {
	var n uint64
	for _, l := range c.links {
		n += l.sizeBytes()
	}
	return n
}

// FPRate returns 1 - prod(1 - fp_i) over the links at their current fill.
func (c *chain) FPRate() float64 {
	q := 1.0
	for _, l := range c.links {
		q *= 1 - l.fpRate()
	}
	return 1 - q
}

func (c *chain) Kind() Kind { return c.kind }
