package rotate

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Schedule is the window in force over the generations of one or more
// rings: the rings of one engine share it ([Options.Schedule]), so that
// they expire every generation at the same time and a change made through
// any of them holds for all. It is safe for concurrent use.
//
// A window change never shortens the time a hash already added is held:
// expiry is monotone. A change to window w made at t takes effect from
// the generation current at t when w is wider than its window (the hashes that
// generation takes from then on are held for w), and from the next one
// when w is narrower (the current generation's hashes keep the window
// they arrived under). Generation g expires at max(end(g) + w(g), F),
// where w(g) is the window in force from g on and F the expiry of the
// generation before the change: a later generation never expires before
// an earlier one. So a hash added at t is held for at least the window in
// force at t, and at most the widest window in force since then, or in
// force within that window before t, plus a span.
type Schedule struct {
	span     int64 // ns
	min, max int64 // ns: the range of windows
	mu       sync.Mutex
	segs     atomic.Pointer[[]WindowChange]
	// newest is the highest generation a ring of the schedule has made.
	newest atomic.Uint64
}

// WindowChange is one entry of a [Schedule]: from generation From on, the
// window is Window, and no generation expires before Floor (Unix ns, the
// expiry of generation From-1 when the change was made).
type WindowChange struct {
	From   uint64        `json:"from"`
	Window time.Duration `json:"window"`
	Floor  int64         `json:"floor"`
}

// newSchedule returns the schedule of a ring of cfg: the window fixed at
// cfg.Window until a change.
func newSchedule(cfg Options, span int64) *Schedule {
	s := &Schedule{span: span, min: int64(cfg.Window), max: int64(cfg.maxWindow())}
	segs := []WindowChange{{From: 0, Window: cfg.Window, Floor: math.MinInt64}}
	s.segs.Store(&segs)
	return s
}

// Window returns the window in force for the generations made from now
// on.
func (s *Schedule) Window() time.Duration {
	segs := *s.segs.Load()
	return segs[len(segs)-1].Window
}

// Changes returns the schedule's entries, oldest first: what [Schedule.Restore]
// takes back. Entries whose generations have all expired are pruned by
// the changes after them.
func (s *Schedule) Changes() []WindowChange {
	return append([]WindowChange(nil), *s.segs.Load()...)
}

// expiry returns the time (ns) at which generation id is dropped.
func (s *Schedule) expiry(id uint64) int64 {
	segs := *s.segs.Load()
	i := len(segs) - 1
	for i > 0 && segs[i].From > id {
		i--
	}
	return max(int64(id+1)*s.span+int64(segs[i].Window), segs[i].Floor)
}

// oldestLive returns the smallest generation not expired at ns.
func (s *Schedule) oldestLive(ns int64) uint64 {
	segs := *s.segs.Load()
	for i, c := range segs {
		from := c.From
		if i == 0 {
			from = 0
		}
		g := from
		if c.Floor <= ns {
			// (g+1)*span + window > ns
			if d := ns - int64(c.Window); d >= 0 {
				g = max(g, uint64(d/s.span))
			}
		}
		if i == len(segs)-1 || g < segs[i+1].From {
			return g
		}
	}
	panic("unreachable")
}

// noteGeneration records that a ring made generation id.
func (s *Schedule) noteGeneration(id uint64) {
	for {
		n := s.newest.Load()
		if id <= n || s.newest.CompareAndSwap(n, id) {
			return
		}
	}
}

// set makes w the window in force, changed at now, and returns whether it
// changed.
func (s *Schedule) set(w time.Duration, now time.Time) (bool, error) {
	if int64(w) < s.min || int64(w) > s.max {
		return false, fmt.Errorf("%w: %v is outside [%v, %v]", ErrWindowOutOfRange, w, time.Duration(s.min), time.Duration(s.max))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, ok := s.next(w, now)
	if ok {
		s.segs.Store(&next)
	}
	return ok, nil
}

// Preview returns the entries the schedule would hold after a change to
// window w at now, without making it, and whether w differs from the
// window in force. Unlike [Ring.SetWindow] it takes any positive w: a
// state reopened under other options keeps the expiry of its keys.
func (s *Schedule) Preview(w time.Duration, now time.Time) ([]WindowChange, bool, error) {
	if w <= 0 {
		return nil, false, fmt.Errorf("%w: %v is not positive", ErrWindowOutOfRange, w)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, ok := s.next(w, now)
	return next, ok, nil
}

// next computes set's new entries; s.mu is held.
func (s *Schedule) next(w time.Duration, now time.Time) ([]WindowChange, bool) {
	segs := *s.segs.Load()
	cur := segs[len(segs)-1].Window
	if w == cur {
		return append([]WindowChange(nil), segs...), false
	}
	ns := now.UnixNano()
	// The current generation: the clock's, and never one before a
	// generation a ring has made (a change made before the rings restore
	// theirs would start too early: see dedup's settleWindow).
	c := s.newest.Load()
	if ns > 0 {
		c = max(c, uint64(ns/s.span))
	}
	// Wider than the current generation's window: from it on; otherwise
	// from the next, which holds no hash yet (the current one keeps the
	// window its hashes arrived under).
	from := c + 1
	if int64(w) > int64(s.windowAt(segs, c)) {
		from = c
	}
	floor := int64(math.MinInt64)
	if from > 0 {
		floor = s.expiry(from - 1)
	}
	// The entries from `from` on hold no hash w could shorten: either
	// they start past every generation made, or from is the current one
	// and w is wider than its window.
	keep := len(segs)
	for keep > 1 && segs[keep-1].From >= from {
		keep--
	}
	next := append([]WindowChange(nil), segs[:keep]...)
	if next[0].From >= from && keep == 1 {
		// The first entry starts at or after from: it is replaced.
		next = next[:0]
	}
	next = append(next, WindowChange{From: from, Window: w, Floor: floor})
	// Prune the entries whose generations have all expired at now.
	oldest := s.oldestLiveOf(next, ns)
	i := 0
	for i+1 < len(next) && next[i+1].From <= oldest {
		i++
	}
	return next[i:], true
}

// windowAt is the window of the entry of segs that generation id falls in.
func (s *Schedule) windowAt(segs []WindowChange, id uint64) time.Duration {
	i := len(segs) - 1
	for i > 0 && segs[i].From > id {
		i--
	}
	return segs[i].Window
}

// oldestLiveOf is oldestLive over the entries segs.
func (s *Schedule) oldestLiveOf(segs []WindowChange, ns int64) uint64 {
	t := &Schedule{span: s.span}
	t.segs.Store(&segs)
	return t.oldestLive(ns)
}

// Restore replaces the schedule with changes, as [Schedule.Changes]
// returned them: what a restart takes back so that no generation expires
// before the window it was made under says. The entries must be in
// ascending From order with positive windows; a window outside [Window,
// MaxWindow] is allowed (a state made under other options keeps its
// expiry), and the window in force after it is the last entry's.
func (s *Schedule) Restore(changes []WindowChange) error {
	if len(changes) == 0 {
		return errors.New("rotate: Restore of an empty schedule")
	}
	for i, c := range changes {
		if c.Window <= 0 {
			return fmt.Errorf("rotate: schedule entry %d: window %v is not positive", i, c.Window)
		}
		if i > 0 && c.From <= changes[i-1].From {
			return fmt.Errorf("rotate: schedule entry %d: generation %d does not follow %d", i, c.From, changes[i-1].From)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	segs := append([]WindowChange(nil), changes...)
	s.segs.Store(&segs)
	return nil
}

// MaxHeld returns the most generations a ring of the schedule holds at
// once while its window stays within [Options.Window,
// Options.MaxWindow]: MaxWindow's generations plus one.
func (s *Schedule) MaxHeld() int { return int(ceilDiv(s.max, s.span)) + 1 }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// SetWindow makes w, within [Options.Window, Options.MaxWindow], the
// window in force from now on for every ring sharing r's [Schedule]. It
// shortens nothing already held (see Schedule). Rings sharing the
// schedule may be used concurrently with it; it reports whether the window
// changed.
func (r *Ring) SetWindow(w time.Duration, now time.Time) (bool, error) {
	return r.sched.set(w, now)
}

// Window returns the window in force for the generations made from now on.
func (r *Ring) Window() time.Duration { return r.sched.Window() }

// Schedule returns the ring's window schedule.
func (r *Ring) Schedule() *Schedule { return r.sched }

// maxWindow is MaxWindow, or Window when MaxWindow is 0.
func (c *Options) maxWindow() time.Duration {
	if c.MaxWindow == 0 {
		return c.Window
	}
	return c.MaxWindow
}

// sizedGenerations is the N the ring's filters are sized for (N+1 live at
// once): Generations with a fixed window, else the generations of
// MaxWindow.
func (c *Options) sizedGenerations() int {
	if c.MaxWindow == 0 || c.MaxWindow == c.Window {
		return c.Generations
	}
	span := int64(c.Window / time.Duration(c.Generations))
	return int(ceilDiv(int64(c.MaxWindow), span))
}
