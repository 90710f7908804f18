package filter

import (
	"fmt"
	"math"
)

// Growth parameters of the scalable construction (Almeida, Baquero, Preguiça
// and Hutchison, "Scalable Bloom Filters", 2007). A chain's growth links
// follow a schedule recorded in its encoding: link i >= 1 holds
// base*growth^i keys at a target of fp*(1-r)*r^i, r the tightening ratio.
// Link 0 is the table New sized for the load; its parameters are its own.
//
// Bloom and blocked (firstShare): link 0 gets (1 - 1/32) of the target,
// the growth links the remaining 1/32 between them, halving link by link
// (the schedule's fp is fp/16 and r = 1/2), and the first growth link is a
// quarter of link 0 (base = capacity/8), doubling from there. A filter
// sized for its load then meets 31/32 of its target, not 3/4 of it: an
// error rate paid for in memory but never used is waste. A generation that
// runs 10% over its estimate pays a quarter-size link, not a twice-size
// one; each further link costs about 1.6 more bits per key than the one
// before it.
//
// Cuckoo keeps the first schedule (link 0 at 3/4 of the target, r = 1/4,
// each link twice the one before): its bytes per key double with every
// halving of the target, so small, tight links cost it more than large
// ones. Unmarshal accepts any ratio in (0, 1) and any base, so encodings
// of either schedule decode, and grow as they were made to.
const (
	growth  = 2
	tighten = 0.25
	// firstShare is the share of the target that growth links of a bloom
	// or blocked chain get; link 0 gets the rest.
	firstShare = 1.0 / 32
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
	kind Kind
	// base, fp and r are the growth schedule: link i >= 1 holds
	// base*growth^i keys at target fp*(1-r)*r^i (see growth).
	base  uint64
	fp    float64
	r     float64
	links []link
	// journal, when not nil, holds every hash given to the filter, so that
	// it can be rebuilt at another capacity (Regrow); grow, when set, is
	// asked for that capacity when the filter is full.
	journal []uint64
	grow    func(keys uint64) (capacity uint64, keep bool)
	// chainOnStop: the rebuild that ends the journal sets the chain up to
	// keep growing (ChainOnStop).
	chainOnStop bool
}

// New returns an empty growable filter of the given kind for capacity
// distinct hashes at false-positive rate fp, with 1 <= capacity <= 2^48 and
// 0 < fp < 1.
//
// The filter is a chain of fixed-size filters. The first is sized for
// capacity keys at most of the target (31/32 for bloom and blocked, 3/4
// for cuckoo); when the newest is full, the next insert chains another
// with a tighter target (see growth for the schedule), so the estimated
// compound rate stays at or below fp forever and memory grows with the
// data. Test checks every link, so a chain that has grown k times costs
// k+1 lookups on a miss: size capacity for the expected load.
func New(kind Kind, capacity uint64, fp float64) (Filter, error) {
	if kind == Interleaved || kind == Wide {
		if err := validate(Blocked, capacity, fp); err != nil {
			return nil, err
		}
		return newLaneFilter(capacity, fp, kind == Wide)
	}
	if kind == Fuse {
		return nil, fmt.Errorf("filter: kind: fuse filters are built from their hashes (BuildFuse), not by New")
	}
	if err := validate(kind, capacity, fp); err != nil {
		return nil, err
	}
	first, _, err := firstLink(kind, capacity, fp)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	c := &chain{kind: kind}
	c.schedule(capacity, fp)
	c.links = []link{newLink(kind, capacity, first)}
	return c, nil
}

// firstTarget returns the target of link 0 of a chain New makes for fp.
func firstTarget(kind Kind, fp float64) float64 {
	if kind == Cuckoo {
		return linkTarget(fp, tighten, 0)
	}
	return fp * (1 - firstShare)
}

// firstLink returns the target and the table size of link 0 of a chain of
// kind holding capacity keys at the compound target fp, or an error when
// that table is over the kind's limit.
func firstLink(kind Kind, capacity uint64, fp float64) (target, bytes float64, err error) {
	target = firstTarget(kind, fp)
	k := linkKinds[kind]
	bytes = k.bytes(capacity, target)
	if limit := k.limit; bytes > float64(limit) {
		return 0, 0, fmt.Errorf("capacity %d at fp %g needs %.0f bytes of %s table, over its %d limit", capacity, fp, bytes, kind, limit)
	}
	return target, bytes, nil
}

// schedule sets the growth links' schedule of a chain whose link 0 holds
// capacity keys, for a compound target fp.
func (c *chain) schedule(capacity uint64, fp float64) {
	if c.kind == Cuckoo {
		c.base, c.fp, c.r = capacity, fp, tighten
		return
	}
	// Link i >= 1: (fp*firstShare*2) * (1/2) * (1/2)^i = fp*firstShare/2^i,
	// which sums to fp*firstShare; capacity/4 * 2^(i-1).
	c.base, c.fp, c.r = max(1, capacity/8), fp*firstShare*2, 0.5
}

// EstimateBytes returns the table memory New(kind, capacity, fp) allocates,
// before any growth.
func EstimateBytes(kind Kind, capacity uint64, fp float64) (uint64, error) {
	if kind == Interleaved || kind == Wide {
		if err := validate(Blocked, capacity, fp); err != nil {
			return 0, err
		}
		return EstimateLaneTableBytes(LaneTableOptions{Lanes: 1, Capacity: capacity, FalsePositiveRate: fp * (1 - overflowShare), Wide: kind == Wide})
	}
	if kind == Fuse {
		if err := validate(Blocked, capacity, fp); err != nil {
			return 0, err
		}
		return FuseBytes(capacity, FuseWidth(fp)), nil
	}
	if err := validate(kind, capacity, fp); err != nil {
		return 0, err
	}
	_, b, err := firstLink(kind, capacity, fp)
	if err != nil {
		return 0, fmt.Errorf("filter: %w", err)
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

// linkCapacity returns the nominal capacity of growth link i (saturating).
func linkCapacity(base uint64, i int) uint64 {
	c := base
	for range i {
		if c > math.MaxUint64/growth {
			return math.MaxUint64
		}
		c *= growth
	}
	return c
}

// linkKinds holds what a chain needs of each kind it links: make a link
// for a capacity and target, the table size of one (as a float: absurd
// requests must not overflow), and the largest table New accepts
// (maxLinkBytes, or less where the backend's indexing caps it).
var linkKinds = map[Kind]struct {
	make  func(capacity uint64, fp float64) link
	bytes func(capacity uint64, fp float64) float64
	limit uint64
}{
	Bloom:   {func(n uint64, fp float64) link { return newBloom(n, fp) }, bloomBytes, maxLinkBytes},
	Cuckoo:  {func(n uint64, fp float64) link { return newCuckoo(n, fp) }, cuckooBytes, maxCuckooSlots},
	Blocked: {func(n uint64, fp float64) link { return newBlocked(n, fp) }, blockedBytes, maxBlocks * blockBytes},
}

func newLink(kind Kind, capacity uint64, fp float64) link {
	k, ok := linkKinds[kind]
	if !ok {
		panic("filter: unknown kind " + kind.String())
	}
	return k.make(capacity, fp)
}

// chainLink chains a new link and returns it.
func (c *chain) chainLink() link {
	i := len(c.links)
	l := newLink(c.kind, linkCapacity(c.base, i), linkTarget(c.fp, c.r, i))
	c.links = append(c.links, l)
	return l
}

// Reserve makes the chain's next growth link hold at least n keys. A
// restore that knows how many keys it is about to add to a restored filter
// (the commit log after a snapshot) chains one link sized for them instead
// of a run of doubling links, each at a tighter target than the one before
// (a restored small first generation took 2.3x its bytes per key that
// way). A link's target depends only on its index, so the compound rate
// keeps its bound; only the schedule's base grows, and the encoding keeps
// it.
func (c *chain) Reserve(n uint64) {
	i := len(c.links)
	if i >= 48 {
		return // linkCapacity(base, i) >= 2^48 >= any capacity
	}
	want := (n + 1<<i - 1) >> i
	c.base = min(max(c.base, want), maxCapacity)
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
	if c.journal != nil {
		return c.testOrAddJournaled(h)
	}
	return c.testOrAdd(h)
}

func (c *chain) testOrAdd(h uint64) bool {
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
		last = c.chainLink()
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

// sum adds f over the links.
func (c *chain) sum(f func(link) uint64) uint64 {
	var n uint64
	for _, l := range c.links {
		n += f(l)
	}
	return n
}

func (c *chain) Count() uint64 { return c.sum(link.count) }

func (c *chain) Capacity() uint64 { return c.sum(link.capacity) }

func (c *chain) SizeBytes() uint64 { return c.sum(link.sizeBytes) }

// FPRate returns 1 - prod(1 - fp_i) over the links at their current fill.
func (c *chain) FPRate() float64 {
	q := 1.0
	for _, l := range c.links {
		q *= 1 - l.fpRate()
	}
	return 1 - q
}

func (c *chain) Kind() Kind { return c.kind }

// Regrower is implemented by the filters New returns for the chained kinds
// (bloom, cuckoo, blocked). While it keeps a journal of the hashes it is
// given (8 bytes each), such a filter can be rebuilt at another capacity
// from them, keeping a single link at its full target: a ring's first
// generation starts small and grows that way with the keys it sees, where
// chaining would pay a tighter target for every link.
type Regrower interface {
	Filter
	// StartJournal makes the (empty, never grown) filter remember every
	// hash it is given from now on. When it is full, grow is called with
	// the keys it holds and returns the capacity to rebuild it at (0: none,
	// it chains as usual) and whether to keep the journal afterwards; a
	// filter rebuilt without it chains growth links as large as the chain
	// before them (the first the size of the rebuilt link, doubling), so
	// its memory follows the keys that keep coming.
	StartJournal(grow func(keys uint64) (capacity uint64, keep bool)) error
	// StopJournal forgets the journal: the filter chains as usual.
	StopJournal()
	// ChainOnStop makes the rebuild that ends the journal (grow returning
	// keep false) set the filter up for a chain that keeps growing with
	// the keys, for bloom and blocked: the rebuilt link at half the
	// target, growth links sharing the other half, each as large as the
	// chain before it (see regrowToChain). Cuckoo ignores it.
	ChainOnStop()
	// Journaling reports whether the filter keeps a journal.
	Journaling() bool
	// JournalBytes returns the memory the journal holds.
	JournalBytes() uint64
	// Regrow rebuilds the journaling filter as one link sized for capacity
	// holding every hash of the journal (chaining past capacity, as
	// inserts would), keeping its target.
	Regrow(capacity uint64) error
}

// StartJournal implements [Regrower].
func (c *chain) StartJournal(grow func(keys uint64) (capacity uint64, keep bool)) error {
	if len(c.links) != 1 || c.links[0].count() != 0 {
		return fmt.Errorf("filter: StartJournal on a filter that holds %d keys in %d links", c.Count(), len(c.links))
	}
	c.journal = make([]uint64, 0, 64)
	c.grow = grow
	return nil
}

// StopJournal implements [Regrower].
func (c *chain) StopJournal() { c.journal, c.grow = nil, nil }

// ChainOnStop implements [Regrower].
func (c *chain) ChainOnStop() { c.chainOnStop = c.kind != Cuckoo }

// Journaling implements [Regrower].
func (c *chain) Journaling() bool { return c.journal != nil }

// JournalBytes implements [Regrower].
func (c *chain) JournalBytes() uint64 { return 8 * uint64(cap(c.journal)) }

// compoundFP returns the target the chain was made for: link 0's target
// plus the growth links' (see schedule).
func (c *chain) compoundFP() float64 {
	if c.kind == Cuckoo {
		return c.fp
	}
	return c.fp / (2 * firstShare)
}

// Regrow implements [Regrower].
func (c *chain) Regrow(capacity uint64) error {
	if c.journal == nil {
		return fmt.Errorf("filter: Regrow of a filter that keeps no journal")
	}
	if capacity < 1 || capacity > maxCapacity {
		return fmt.Errorf("filter: Regrow: capacity must be in [1, 2^48], got %d", capacity)
	}
	fp := c.compoundFP()
	first, _, err := firstLink(c.kind, capacity, fp)
	if err != nil {
		return fmt.Errorf("filter: Regrow: %w", err)
	}
	c.schedule(capacity, fp)
	c.links = []link{newLink(c.kind, capacity, first)}
	j := c.journal
	b, _ := c.links[0].(*blocked)
	for i, h := range j {
		if b != nil && i+regrowAhead < len(j) {
			b.prefetch(j[i+regrowAhead])
		}
		c.testOrAdd(h)
	}
	return nil
}

// regrowToChain rebuilds the journaling filter as one link for capacity
// keys, drops the journal and sets a schedule for a chain that keeps
// growing with the keys: link 0 at half the target
// and growth links sharing the other half, halving link by link (r = 1/2),
// the first as large as link 0 and each as large as the chain before it.
// A young generation that outgrew its journal grows by several links; at
// the schedule New sets (growth links sharing 1/32 of the target, the
// first a quarter of link 0) the seventh would take 12 bits a key more
// than link 0, here 7. The compound target is fp as before; the encoding
// records the schedule. Bloom and blocked only (see ChainOnStop).
func (c *chain) regrowToChain(capacity uint64) error {
	if c.journal == nil {
		return fmt.Errorf("filter: Regrow of a filter that keeps no journal")
	}
	if capacity < 1 || capacity > maxCapacity {
		return fmt.Errorf("filter: Regrow: capacity must be in [1, 2^48], got %d", capacity)
	}
	fp := c.compoundFP()
	target := fp / 2
	k := linkKinds[c.kind]
	if b := k.bytes(capacity, target); b > float64(k.limit) {
		return fmt.Errorf("filter: Regrow: capacity %d at fp %g needs %.0f bytes of %s table, over its %d limit", capacity, target, b, c.kind, k.limit)
	}
	j := c.journal
	c.StopJournal() // compoundFP holds only for New's schedule: no Regrow after this
	c.base, c.fp, c.r = max(1, capacity/2), fp, 0.5
	c.links = []link{newLink(c.kind, capacity, target)}
	b, _ := c.links[0].(*blocked)
	for i, h := range j {
		if b != nil && i+regrowAhead < len(j) {
			b.prefetch(j[i+regrowAhead])
		}
		c.testOrAdd(h)
	}
	return nil
}

// regrowAhead is how far ahead Regrow prefetches the journal's blocks.
const regrowAhead = 8

// testOrAddJournaled is TestOrAdd while the chain keeps a journal: every
// hash is journaled (even one that tests true: a false positive now may
// not be one in the rebuilt filter, and must be held there), and a full
// single link asks grow for a larger one.
func (c *chain) testOrAddJournaled(h uint64) bool {
	if len(c.links) != 1 { // rebuilt too small: it chains, the journal is no use
		c.StopJournal()
		return c.testOrAdd(h)
	}
	c.journal = append(c.journal, h)
	if c.links[0].full() && c.grow != nil && !c.links[0].test(h) {
		capacity, keep := c.grow(c.links[0].count())
		if !keep && c.chainOnStop && capacity > c.links[0].capacity() && c.regrowToChain(capacity) == nil {
			return false // the rebuilt filter holds h: it was journaled
		}
		if capacity > c.links[0].capacity() && c.Regrow(capacity) == nil {
			if !keep {
				c.StopJournal()
			}
			return false // the rebuilt filter holds h: it was journaled
		}
		c.StopJournal()
	}
	return c.testOrAdd(h)
}
