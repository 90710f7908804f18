// Package rotate keeps a time-rotating ring of filter generations: the
// sliding window of dedup's pre-filter.
//
// A window W is cut into N generations of span W/N. Generation g covers the
// wall-clock interval [g*span, (g+1)*span) counted from the Unix epoch, so
// generation boundaries need no state beyond the span and survive restarts.
// A hash added while the clock reads t goes into generation floor(t/span) and
// stays until the clock reaches the end of that generation plus W: every hash
// is held for at least W and at most W + W/N. The ring therefore holds up to
// N+1 live generations, and each is sized for p = 1 - (1-fp)^(1/(N+1)), so
// that a lookup across all of them, each at capacity, meets the target fp
// exactly (1 - (1-p)^(N+1) = fp), not the union bound's (N+1)*p.
//
// Memory follows the traffic (sizing.go): a fresh ring's first generation
// starts small and grows with the keys it sees, and every later generation
// is sized from the rate measured in the one before, up to the capacity
// the configured rate gives.
//
// With Kind filter.Fuse, every generation older than the newest is sealed
// into a static binary fuse filter built from its hashes (fuse.go).
//
// With Options.MaxWindow the window can change while the ring runs
// (Ring.SetWindow, window.go): the span stays, each generation expires at
// its end plus the window in force from it on, and never before the
// generation before it, so a change shortens no hash already held.
//
// The clock is injected: every method takes the current time. A clock that
// steps backwards never expires anything early (expiry only ever compares the
// current time with a generation's end) and never creates an older generation
// (hashes observed then go into the newest one).
//
// A Ring is not safe for concurrent use; dedup keeps one per shard under the
// shard's lock.
package rotate

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// Options shapes a Ring. Every field is required: the ring has no defaults
// of its own, its caller (the dedup engine, through dedup.Options) owns
// them.
type Options struct {
	// Window is how long a hash is remembered at least.
	Window time.Duration
	// Generations is N, the number of generations the window is cut into,
	// in [1, MaxGenerations]; a hash may be remembered up to Window +
	// Window/N.
	Generations int
	// Kind is the filter backend. With filter.Interleaved or filter.Wide
	// the generations share lane tables (see interleaved.go), and Generations is at most
	// filter.MaxLanes-1. With filter.Fuse the newest generation is a
	// blocked filter keeping a journal of its hashes and every older one a
	// static binary fuse filter built from it (see fuse.go).
	Kind filter.Kind
	// Capacity is the number of distinct hashes one generation is sized for
	// at most while the traffic stays below it (the expected rate times the
	// span); generations are sized from the rate measured, within it. A
	// generation that receives more grows by chaining, keeping its
	// false-positive rate.
	Capacity uint64
	// FalsePositiveRate is the target rate of a lookup across the whole
	// ring, in (0, 1).
	FalsePositiveRate float64
	// NewSpool, for Kind filter.Fuse, returns the spool that keeps the
	// hashes of new generation id until it is sealed; nil keeps them in
	// memory (8 bytes a hash). Other kinds ignore it.
	NewSpool func(id uint64) (Spool, error)
	// MaxWindow is the longest window [Ring.SetWindow] may set, at least
	// Window: the ring's filters are sized for its generations (a lookup
	// across MaxWindow/span+1 of them meets FalsePositiveRate) and Window
	// is the shortest. 0 means Window: the window is fixed.
	MaxWindow time.Duration
	// Schedule is the window schedule the ring follows, shared by the rings
	// made with it (see [Schedule]); [Ring.Options] returns the ring's, so
	// rings made from one ring's Options share it. nil gives the ring a
	// schedule of its own, at Window.
	Schedule *Schedule
}

// MaxGenerations is the largest Options.Generations.
const MaxGenerations = 1024

// validate reports the first bad field by name.
func (c *Options) validate() error {
	switch {
	case c.Window <= 0:
		return fmt.Errorf("rotate: Window must be positive, got %v", c.Window)
	case c.Generations < 1 || c.Generations > MaxGenerations:
		return fmt.Errorf("rotate: Generations must be in [1, %d], got %d", MaxGenerations, c.Generations)
	case c.Window/time.Duration(c.Generations) <= 0:
		return fmt.Errorf("rotate: Window %v is too short for %d Generations", c.Window, c.Generations)
	case c.Capacity < 1:
		return fmt.Errorf("rotate: Capacity must be at least 1, got %d", c.Capacity)
	case !(c.FalsePositiveRate > 0 && c.FalsePositiveRate < 1):
		return fmt.Errorf("rotate: FalsePositiveRate must be in (0, 1), got %v", c.FalsePositiveRate)
	}
	if _, err := filter.ParseKind(c.Kind.String()); err != nil {
		return fmt.Errorf("rotate: Kind: %w", err)
	}
	if c.MaxWindow != 0 && c.MaxWindow < c.Window {
		return fmt.Errorf("rotate: MaxWindow %v is shorter than Window %v", c.MaxWindow, c.Window)
	}
	n := c.sizedGenerations()
	if n > MaxGenerations {
		return fmt.Errorf("rotate: MaxWindow %v holds %d generations of %v, over %d", c.MaxWindow, n, c.Window/time.Duration(c.Generations), MaxGenerations)
	}
	if c.Kind == filter.Fuse {
		if err := FuseFits(c.FalsePositiveRate, n); err != nil {
			return err
		}
	}
	if filter.Laned(c.Kind) && n+1 > filter.MaxLanes {
		if n != c.Generations {
			return fmt.Errorf("rotate: MaxWindow %v holds %d generations, over the %d of Kind %v (one lane each, plus one)", c.MaxWindow, n, filter.MaxLanes-1, c.Kind)
		}
		return fmt.Errorf("rotate: Generations must be at most %d with Kind %v (one lane each, plus one), got %d", filter.MaxLanes-1, c.Kind, c.Generations)
	}
	if s := c.Schedule; s != nil && (s.span != int64(c.Window/time.Duration(c.Generations)) || s.min != int64(c.Window) || s.max != int64(c.maxWindow())) {
		return errors.New("rotate: Schedule was made for another Window, MaxWindow or Generations")
	}
	return nil
}

// Generation is one span of the window and its filter.
type Generation struct {
	// ID is floor(start / span), counted from the Unix epoch.
	ID uint64
	// Filter holds the hashes added to this generation.
	Filter filter.Filter
}

// Ring is the ring of live generations, oldest first.
type Ring struct {
	cfg    Options
	span   int64 // nanoseconds
	perGen float64
	// sched is the window in force over generations, maybe shared with
	// other rings (window.go).
	sched *Schedule
	gens  []*Generation // ascending ID; gens[len-1] is the newest
	// expireAt is the time (ns) at which the oldest generation expires;
	// math.MaxInt64 when the ring is empty.
	expireAt int64
	// nextAt is the start (ns) of the generation after the newest one.
	nextAt int64
	// lanes holds the shared lane tables when Kind is filter.Interleaved
	// or filter.Wide.
	lanes *laneTables
	// now is the latest clock reading (ns) given to Advance, Active or
	// Add; 0 before any.
	now int64
	// sizing is the state of memory that follows the traffic (sizing.go).
	sizing sizing
	// fuse is the state of a ring of Kind filter.Fuse (fuse.go), nil for
	// the other kinds.
	fuse *fuseState
}

// New returns an empty ring, or an error naming the first bad field of cfg.
func New(cfg Options) (*Ring, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The filters are sized for the generations of the longest window.
	sized := cfg
	sized.Generations = cfg.sizedGenerations()
	r := &Ring{
		cfg:    cfg,
		span:   int64(cfg.Window / time.Duration(cfg.Generations)),
		perGen: PerGenerationFP(cfg.FalsePositiveRate, sized.Generations),
	}
	if r.cfg.Schedule == nil {
		r.cfg.Schedule = newSchedule(cfg, r.span)
	}
	r.sched = r.cfg.Schedule
	if filter.Laned(cfg.Kind) {
		r.lanes = newLaneTables(sized)
	}
	if cfg.Kind == filter.Fuse {
		r.fuse = newFuseState(sized)
	}
	r.reset()
	return r, nil
}

func (r *Ring) reset() {
	r.expireAt = 1<<63 - 1
	r.nextAt = -1 << 63
}

// Span returns the duration of one generation.
func (r *Ring) Span() time.Duration { return time.Duration(r.span) }

// Options returns the ring's configuration with defaults filled in.
func (r *Ring) Options() Options { return r.cfg }

// PerGenerationFP returns the false-positive target of each generation.
func (r *Ring) PerGenerationFP() float64 { return r.perGen }

// PerGenerationFP returns the target each of the N+1 generations of a ring
// of N Generations gets for a ring target fp: 1 - (1-fp)^(1/(N+1)), so that
// a lookup across all of them at capacity meets fp.
func PerGenerationFP(fp float64, generations int) float64 {
	return -math.Expm1(math.Log1p(-fp) / float64(generations+1))
}

// GenerationAt returns the ID of the generation that covers time t. Times
// before the Unix epoch belong to generation 0.
func (r *Ring) GenerationAt(t time.Time) uint64 {
	ns := t.UnixNano()
	if ns < 0 {
		return 0
	}
	return uint64(ns / r.span)
}

// Start returns the start of generation id.
func (r *Ring) Start(id uint64) time.Time { return time.Unix(0, int64(id)*r.span) }

// End returns the end (exclusive) of generation id.
func (r *Ring) End(id uint64) time.Time { return time.Unix(0, int64(id+1)*r.span) }

// Expiry returns the time at which generation id is dropped: its end plus
// the window, or later after a narrower window (see [Schedule]).
func (r *Ring) Expiry(id uint64) time.Time {
	return time.Unix(0, r.sched.expiry(id))
}

// OldestLive returns the ID of the oldest generation still live at t: every
// generation below it has expired.
func (r *Ring) OldestLive(t time.Time) uint64 {
	// Generation g is live while t < (g+1)*span + W, i.e. g > t/span - N - 1.
	return r.sched.oldestLive(t.UnixNano())
}

// Advance brings the ring to time now: it drops every generation that has
// expired and returns their IDs (nil if none). It does not create
// generations; Active does, on demand.
func (r *Ring) Advance(now time.Time) (expired []uint64) {
	ns := now.UnixNano()
	r.now = ns
	if r.sizing.settle {
		r.settleYoung()
	}
	if ns >= r.expireAt {
		expired = r.expire(now)
	}
	// Seal after expiring: a generation that expires now is not sealed.
	if r.fuse != nil && ns >= r.fuse.sealAt {
		r.sealDue(ns)
	}
	return expired
}

// expire drops every generation expired at now and returns their IDs.
func (r *Ring) expire(now time.Time) (expired []uint64) {
	oldest := r.OldestLive(now)
	i := 0
	for i < len(r.gens) && r.gens[i].ID < oldest {
		expired = append(expired, r.gens[i].ID)
		if r.lanes != nil {
			r.lanes.release(r.gens[i].Filter.(*filter.LaneView))
		}
		dropSpool(r.gens[i])
		if r.gens[i] == r.sizing.young {
			r.sizing.young = nil
		}
		r.gens[i] = nil
		i++
	}
	r.gens = append(r.gens[:0], r.gens[i:]...)
	r.updateExpiry()
	return expired
}

func (r *Ring) updateExpiry() {
	if len(r.gens) == 0 {
		r.reset()
		return
	}
	r.expireAt = r.Expiry(r.gens[0].ID).UnixNano()
}

// Active returns the generation that a hash observed at now goes into,
// creating it if needed. If the clock has stepped back behind the newest
// generation, the newest generation is returned: nothing is ever added to a
// generation older than one already created.
func (r *Ring) Active(now time.Time) (*Generation, error) {
	r.now = now.UnixNano()
	if r.now < r.nextAt && len(r.gens) > 0 {
		return r.gens[len(r.gens)-1], nil
	}
	return r.Get(r.GenerationAt(now))
}

// Get returns generation id, creating it if it is not live. Creating a
// generation older than the newest one is allowed (a restore replays older
// generations); the ring stays sorted.
func (r *Ring) Get(id uint64) (*Generation, error) {
	i := len(r.gens)
	for i > 0 && r.gens[i-1].ID >= id {
		if r.gens[i-1].ID == id {
			return r.gens[i-1], nil
		}
		i--
	}
	var f filter.Filter
	var err error
	if r.lanes != nil {
		f, err = r.lanes.newGeneration(r.cfg.Capacity, r.measuredBefore(id))
	} else {
		f, err = r.newChained(id)
	}
	if err != nil {
		return nil, fmt.Errorf("rotate: generation %d: %w", id, err)
	}
	g := &Generation{ID: id, Filter: f}
	r.sched.noteGeneration(id)
	if r.lanes == nil && r.fuse == nil && len(r.gens) == 0 {
		r.startYoung(g)
	}
	return r.insert(g)
}

// Insert places a restored generation into the ring. It fails if a
// generation with the same ID is already live.
func (r *Ring) Insert(g *Generation) (*Generation, error) {
	if g == nil || g.Filter == nil {
		return nil, errors.New("rotate: Insert of a nil generation")
	}
	// A restored generation ends the first one's journal: the ring is no
	// longer fresh.
	r.stopYoung()
	r.sched.noteGeneration(g.ID)
	return r.insert(g)
}

func (r *Ring) insert(g *Generation) (*Generation, error) {
	i := len(r.gens)
	for i > 0 && r.gens[i-1].ID >= g.ID {
		if r.gens[i-1].ID == g.ID {
			return nil, fmt.Errorf("rotate: generation %d is already live", g.ID)
		}
		i--
	}
	if r.lanes != nil {
		v, ok := g.Filter.(*filter.LaneView)
		if !ok {
			return nil, fmt.Errorf("rotate: Insert of a %v filter into an interleaved ring", g.Filter.Kind())
		}
		if err := r.lanes.adopt(v); err != nil {
			return nil, err
		}
	}
	r.gens = append(r.gens, nil)
	copy(r.gens[i+1:], r.gens[i:])
	r.gens[i] = g
	r.updateExpiry()
	newest := r.gens[len(r.gens)-1].ID
	r.nextAt = int64(newest+1) * r.span
	if r.fuse != nil {
		r.planSeal()
	}
	return g, nil
}

// Lookup calls fn for each live generation whose filter may hold h, newest
// first, until fn returns false. It returns how many generations matched.
func (r *Ring) Lookup(h uint64, fn func(g *Generation) bool) int {
	n := 0
	for i := len(r.gens) - 1; i >= 0; i-- {
		g := r.gens[i]
		if g.Filter.Test(h) {
			n++
			if fn != nil && !fn(g) {
				break
			}
		}
	}
	return n
}

// Contains reports whether any live generation may hold h.
func (r *Ring) Contains(h uint64) bool {
	if r.lanes != nil {
		return r.containsLanes(h)
	}
	for i := len(r.gens) - 1; i >= 0; i-- {
		if r.gens[i].Filter.Test(h) {
			return true
		}
	}
	return false
}

// Add inserts h into generation id if it is live at now, creating it if it
// is not yet there. A hash whose generation has already expired at now is
// outside the window and is not added; Add reports whether it was.
func (r *Ring) Add(id uint64, h uint64, now time.Time) (bool, error) {
	r.now = now.UnixNano()
	if id < r.OldestLive(now) {
		return false, nil
	}
	g, err := r.Get(id)
	if err != nil {
		return false, err
	}
	g.Filter.Add(h)
	return true, nil
}

// Generations returns the live generations, oldest first. The slice is the
// ring's own: do not modify it.
func (r *Ring) Generations() []*Generation { return r.gens }

// Len returns the number of live generations.
func (r *Ring) Len() int { return len(r.gens) }
