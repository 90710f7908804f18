package dedup

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/rotate"
)

// AutoWindow sizes the window from the delays the window advisor measures
// ([WindowAdvice]): after a commit, at most every quarter of a span of the
// engine's clock, the engine widens or narrows its window, within [Min,
// Max], to the window the advice says lets at most MaxLeaks duplicates per
// million events through, or to the widest whose filters fit MaxMemory
// when that one does not. A change never shortens the time a key already
// held is remembered: a key is remembered for at least the window in force
// when it arrived (see [rotate.Schedule]). Every change goes to
// [Options.Logf] and [Stats.AutoWindow], and the window in force is kept
// with the state (its store and each snapshot, with the last decision in
// [SavedWindowAdvice]), so that a restart, [Engine.Backup] and
// [RestoreBackup] forget nothing early; a tool that opens the state
// without AutoWindow leaves that window in force with
// [Options.KeepWindow].
//
// The generations keep the span of the shortest window, Min/Generations:
// at window W the ring holds W/span+1 generations and a new key is tested
// against each (one cache line each with the default filter), and every
// generation's filter is sized so that a lookup across Max's generations
// meets [Options.FalsePositiveRate]. docs/window-auto.md says more.
type AutoWindow struct {
	// MaxLeaks is the target: the duplicates per million events observed
	// that the window may let through, in (0, 1e6]. Default 100.
	MaxLeaks float64
	// Min is the shortest window, and the window a new state starts with;
	// it is [Options.Window], which may be left 0 (or set equal). The
	// advisor measures from it: a key seen again after Min's expiry and
	// forgotten is counted as let through. Default Options.Window (1h).
	Min time.Duration
	// Max is the longest window, at most 1024 generations of
	// Min/Generations (15 with Filter interleaved or wide). Default 8 x
	// Min.
	Max time.Duration
	// MaxMemory bounds the filters' memory ([Stats.FilterBytes]), in
	// bytes: when the window the target needs would take more, the window
	// is the widest that fits, and [AutoWindowStats] says what the target
	// would cost. 0 means no bound. Default 0.
	MaxMemory int64
}

// AutoWindowStats is the state of the self-sizing window, in [Stats].
type AutoWindowStats struct {
	// Window is the window in force for the keys observed now (the fixed
	// Window without [Options.AutoWindow]).
	Window time.Duration `json:"window"`
	// Target is the window the advice says lets at most MaxLeaks
	// duplicates per million through (0 while not known), and TargetBytes
	// the filter memory it would take (0 while not known).
	Target      time.Duration `json:"target"`
	TargetBytes uint64        `json:"target_bytes"`
	// Changes counts the window changes since Open; LastChange is the
	// time of the last (zero if none), on the engine's clock.
	Changes    uint64    `json:"changes"`
	LastChange time.Time `json:"last_change"`
	// Reason says why the window is what it is: "measuring: ...", "target",
	// "budget: ...", "at Min", "at Max: ...", or "fixed" without
	// AutoWindow.
	Reason string `json:"reason"`
}

// autoMinDuplicates is how many duplicates the advice must rest on before
// the window follows it.
const autoMinDuplicates = 300

// autoDeadband is the relative change below which the window is left as
// it is.
const autoDeadband = 0.05

// metaWindowSchedule is the store's metadata entry for the window
// schedule (rotate.Schedule.Changes as JSON).
const metaWindowSchedule = "window-schedule"

// autoDefaults fills the zero fields of o.AutoWindow, on a copy (the
// caller's struct stays as given), and Window from Min.
func (o *Options) autoDefaults() {
	if o.AutoWindow == nil {
		return
	}
	a := *o.AutoWindow
	if a.MaxLeaks == 0 {
		a.MaxLeaks = 100
	}
	if a.Min == 0 {
		a.Min = o.Window
		if a.Min == 0 {
			a.Min = time.Hour
		}
	}
	if o.Window == 0 {
		o.Window = a.Min
	}
	if a.Max == 0 && a.Min > 0 {
		a.Max = 8 * a.Min
	}
	o.AutoWindow = &a
}

// validateAutoWindow reports the bad fields of o.AutoWindow (defaults
// filled) through bad.
func (o *Options) validateAutoWindow(bad func(field, format string, args ...any)) {
	a := o.AutoWindow
	if a == nil {
		return
	}
	if !(a.MaxLeaks > 0 && a.MaxLeaks <= 1e6) {
		bad("AutoWindow.MaxLeaks", "must be in (0, 1e6] duplicates per million events, got %v", a.MaxLeaks)
	}
	if a.Min <= 0 {
		bad("AutoWindow.Min", "must be positive, got %v", a.Min)
	} else if a.Min != o.Window {
		bad("AutoWindow.Min", "is %v but Window is %v: they are one value (the shortest window, which cuts the generations); set one, or both equal", a.Min, o.Window)
	}
	if a.MaxMemory < 0 {
		bad("AutoWindow.MaxMemory", "must not be negative, got %d", a.MaxMemory)
	}
	if a.Max < a.Min {
		bad("AutoWindow.Max", "must be at least Min %v, got %v", a.Min, a.Max)
		return
	}
	if a.Min <= 0 || o.Generations < 1 || o.Generations > maxGenerations {
		return
	}
	span := a.Min / time.Duration(o.Generations)
	if span <= 0 {
		return
	}
	n := (a.Max + span - 1) / span
	limit := int64(maxGenerations)
	if o.Filter == filter.Interleaved.String() || o.Filter == filter.Wide.String() {
		limit = filter.MaxLanes - 1
	}
	if int64(n) > limit {
		bad("AutoWindow.Max", "%v holds %d generations of %v (Min/Generations), over the %d Filter %s holds", a.Max, n, span, limit, o.Filter)
	}
}

// autoWindow is the controller of an engine with Options.AutoWindow.
type autoWindow struct {
	cfg AutoWindow
	// run serialises evaluations: a commit that finds one running skips.
	run sync.Mutex
	// mu guards the fields below.
	mu     sync.Mutex
	st     AutoWindowStats
	nextAt int64 // engine clock (ns) before which no evaluation runs
	// smooth is the targets' moving average (ns), 0 before the first:
	// each evaluation moves it autoSmoothing of the way to the target.
	smooth float64
}

// autoSmoothing is the weight of a new target in the moving average the
// window follows: successive estimates rest on mostly the same delays, and
// their noise would otherwise move the window back and forth, and a
// narrowing takes a window to take effect where a widening is at once.
const autoSmoothing = 0.1

// initAutoWindow sets up the controller; Open calls it once the
// schedule is restored.
func (e *Engine) initAutoWindow() {
	if e.opts.AutoWindow == nil {
		return
	}
	e.auto = &autoWindow{cfg: *e.opts.AutoWindow}
	e.auto.st.Reason = fmt.Sprintf("measuring: 0 duplicates so far, %d needed", autoMinDuplicates)
}

// loadWindowSchedule restores the window schedule kept with the state,
// if any, so that no generation expires before the window it was made
// under says.
func (e *Engine) loadWindowSchedule() error {
	raw, ok, err := e.store.GetMeta(metaWindowSchedule)
	if err != nil {
		return wrap(err, "read window schedule")
	}
	if !ok {
		return nil
	}
	var changes []rotate.WindowChange
	if err := json.Unmarshal(raw, &changes); err != nil {
		return fmt.Errorf("%w: window schedule: %w", ErrCorrupt, err)
	}
	if err := e.timing.Schedule().Restore(changes); err != nil {
		return fmt.Errorf("%w: window schedule: %w", ErrCorrupt, err)
	}
	return nil
}

// settleWindow, once the filters are restored and the clock started,
// goes back to the fixed Window on a state that an AutoWindow left at
// another: from now on (the keys held keep theirs; the rings have noted
// the generations they restored, so the change starts past them).
func (e *Engine) settleWindow() error {
	if w := e.timing.Window(); e.opts.AutoWindow != nil || e.opts.KeepWindow || w == e.opts.Window {
		return nil
	}
	_, err := e.setWindow(e.opts.Window, e.opts.Now(), true)
	return err
}

// setWindow makes w the window in force from now on, and keeps the
// schedule with the state so that a restart honours it: a wider window is
// kept before it takes effect, a narrower one after (until then the state
// keeps the wider, which shortens nothing). force allows a window outside
// AutoWindow's range (a fixed window after a state made under
// AutoWindow).
func (e *Engine) setWindow(w time.Duration, now time.Time, force bool) (bool, error) {
	sched := e.timing.Schedule()
	cur := sched.Window()
	if w == cur {
		return false, nil
	}
	keep := func(changes []rotate.WindowChange) error {
		raw, err := json.Marshal(changes)
		if err != nil {
			return fmt.Errorf("dedup: encode window schedule: %w", err)
		}
		return wrapIf(e.store.SetMeta(metaWindowSchedule, raw), "keep window schedule")
	}
	changes, _, err := sched.Preview(w, now)
	if err != nil {
		return false, fmt.Errorf("dedup: %w", err)
	}
	if w > cur {
		if err := keep(changes); err != nil {
			return false, err
		}
	}
	if force {
		err = sched.Restore(changes)
	} else {
		_, err = e.timing.SetWindow(w, now)
	}
	if err != nil {
		return false, fmt.Errorf("dedup: %w", err)
	}
	if w < cur {
		if err := keep(sched.Changes()); err != nil {
			return true, err
		}
	}
	return true, nil
}

// autoMaxWindow is the longest window of opts (defaults filled): 0
// (fixed) without AutoWindow.
func autoMaxWindow(opts Options) time.Duration {
	if opts.AutoWindow == nil {
		return 0
	}
	return opts.AutoWindow.Max
}

// autoStats returns the controller's state for Stats.
func (e *Engine) autoStats() AutoWindowStats {
	a := e.auto
	if a == nil {
		return AutoWindowStats{Window: e.timing.Window(), Reason: "fixed"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.st
	st.Window = e.timing.Window()
	return st
}

// autoAfterCommit runs the controller after a commit, at most every
// quarter span of the engine's clock.
func (e *Engine) autoAfterCommit() {
	a := e.auto
	if a == nil || e.closed.Load() {
		return
	}
	now := e.opts.Now()
	ns := now.UnixNano()
	a.mu.Lock()
	due := ns >= a.nextAt
	a.mu.Unlock()
	if !due || !a.run.TryLock() {
		return
	}
	defer a.run.Unlock()
	span := int64(e.timing.Span())
	a.mu.Lock()
	a.nextAt = ns + max(span/4, 1)
	a.mu.Unlock()
	e.autoEvaluate(e.Stats(), now)
}

// autoEvaluate sets the window from st's advice at now.
func (e *Engine) autoEvaluate(st Stats, now time.Time) {
	a := e.auto
	cfg := a.cfg
	span := e.timing.Span()
	cur := e.timing.Window()
	adv := st.WindowAdvice
	var decision AutoWindowStats
	want := cur
	perSpan := bytesPerSpan(st)
	target := windowForLeaks(adv, cfg.MaxLeaks, e.opts.Window, e.opts.Generations, span)
	switch {
	case adv.Duplicates < autoMinDuplicates:
		decision.Reason = fmt.Sprintf("measuring: %d duplicates so far, %d needed", adv.Duplicates, autoMinDuplicates)
	case target == 0:
		decision.Reason = fmt.Sprintf("measuring: the advice gives no window for %v leaks per million yet (%s)", cfg.MaxLeaks, adv.Model)
	default:
		decision.Target = target
		if a.smooth == 0 {
			a.smooth = float64(target)
		} else {
			a.smooth += autoSmoothing * (float64(target) - a.smooth)
		}
		want = min(max(time.Duration(a.smooth), cfg.Min), cfg.Max)
		decision.Reason = "target"
		switch {
		case target <= cfg.Min:
			decision.Reason = "at Min"
		case target > cfg.Max:
			decision.Reason = fmt.Sprintf("at Max: the target %v is past it", target.Round(time.Second))
		}
		if perSpan > 0 {
			decision.TargetBytes = windowBytes(target, span, perSpan)
		}
		if cfg.MaxMemory > 0 {
			if perSpan == 0 {
				want = min(want, cur) // no measure of the cost yet: no wider
			} else if windowBytes(want, span, perSpan) > uint64(cfg.MaxMemory) {
				// The widest window whose generations fit.
				k := int64(uint64(cfg.MaxMemory)/perSpan) - 1
				fits := time.Duration(k) * span
				want = max(cfg.Min, min(want, fits))
				decision.Reason = fmt.Sprintf("budget: the target %v needs about %s of filters, over MaxMemory %s; %v fits",
					target.Round(time.Second), humanize.Bytes(decision.TargetBytes), humanize.Bytes(uint64(cfg.MaxMemory)), want.Round(time.Second))
				if fits < cfg.Min {
					decision.Reason = fmt.Sprintf("budget: the target %v needs about %s of filters, over MaxMemory %s; even Min %v takes about %s",
						target.Round(time.Second), humanize.Bytes(decision.TargetBytes), humanize.Bytes(uint64(cfg.MaxMemory)), cfg.Min, humanize.Bytes(windowBytes(cfg.Min, span, perSpan)))
				}
			}
		}
	}
	changed := false
	if want != cur && (math.Abs(float64(want-cur)) > autoDeadband*float64(cur) || want == cfg.Min || want == cfg.Max) {
		var err error
		changed, err = e.setWindow(want, now, false)
		if err != nil && !changed {
			e.logf("dedup: window stays %v: %v", cur, err)
		} else if err != nil {
			e.logf("dedup: window %v -> %v, but the state keeps %v until the next change: %v", cur, want, cur, err)
		}
	}
	a.mu.Lock()
	prev := a.st
	a.st = decision
	a.st.Changes, a.st.LastChange = prev.Changes, prev.LastChange
	if changed {
		a.st.Changes++
		a.st.LastChange = now
	}
	a.mu.Unlock()
	if changed {
		e.logf("dedup: window %v -> %v (%s; %.0f leaks per million at %v measured, target %v)",
			cur, want, decision.Reason, adv.LeaksPerMillion, e.opts.Window, cfg.MaxLeaks)
	}
	// Keep the decision with the advice it rests on (SavedWindowAdvice).
	e.noteAdvice(adv)
}

// bytesPerSpan is the filter memory one generation takes, summed over
// shards: the largest of the newest three (each is sized for 1.5x the
// keys of the one before, so the newest ones are the dearest); 0 before
// two generations exist.
func bytesPerSpan(st Stats) uint64 {
	g := st.GenerationStats
	if len(g) < 2 {
		return 0
	}
	var m uint64
	for _, x := range g[max(0, len(g)-3):] {
		m = max(m, x.Bytes)
	}
	return m
}

// windowBytes is the filter memory a window w holds: its generations,
// plus the one that is filling.
func windowBytes(w, span time.Duration, perSpan uint64) uint64 {
	n := (w + span - 1) / span
	return uint64(n+1) * perSpan
}

// windowForLeaks returns the window that lets at most target duplicates
// per million through, from the advice measured at window base cut into
// gens generations, for a ring whose generations span span; 0 if the
// advice does not say. The advice gives the leaks at base and the windows
// for 100, 10 and 1 per million; between them the leaks are taken as
// exponential in the window (exact for an exponential tail), and past the
// last two points their slope goes on. The advice's windows keep
// Window/Generations retention past the window; a ring of span span keeps
// span: the window is moved so that the mean retention is the same.
func windowForLeaks(adv WindowAdvice, target float64, base time.Duration, gens int, span time.Duration) time.Duration {
	type point struct{ w, leaks float64 }
	var pts []point
	for _, p := range []struct {
		w     time.Duration
		leaks float64
	}{{adv.WindowFor100, 100}, {adv.WindowFor10, 10}, {adv.WindowFor1, 1}} {
		if p.w > 0 {
			// The advice's window w keeps [w, w + w/gens]; a ring of span
			// keeps [W, W + span]: the same mean for W = w + (w/gens -
			// span)/2.
			w := float64(p.w) + (float64(p.w)/float64(gens)-float64(span))/2
			pts = append(pts, point{w, p.leaks})
		}
	}
	if adv.LeaksPerMillion > 0 && adv.LeaksRelErr < 1 {
		pts = append(pts, point{float64(base) + (float64(base)/float64(gens)-float64(span))/2, adv.LeaksPerMillion})
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].w < pts[j].w })
	// Keep the points whose leaks fall as the window grows.
	mono := pts[:0]
	for _, p := range pts {
		if len(mono) == 0 || p.leaks < mono[len(mono)-1].leaks {
			mono = append(mono, p)
		}
	}
	pts = mono
	switch {
	case len(pts) == 0:
		return 0
	case len(pts) == 1:
		if pts[0].leaks == target {
			return time.Duration(pts[0].w)
		}
		return 0
	}
	if target >= pts[0].leaks {
		// At or below the shortest window known: the leaks there already
		// meet the target.
		if pts[0].w <= float64(base) {
			return base
		}
		// Extrapolate back along the first two points.
		return time.Duration(max(float64(base), interpLog(pts[0], pts[1], target)))
	}
	for i := 0; i+1 < len(pts); i++ {
		if target >= pts[i+1].leaks {
			return time.Duration(interpLog(pts[i], pts[i+1], target))
		}
	}
	n := len(pts)
	return time.Duration(interpLog(pts[n-2], pts[n-1], target))
}

// interpLog returns the window at which log(leaks), linear in the window
// through a and b, reaches target.
func interpLog[P interface{ ~struct{ w, leaks float64 } }](a, b P, target float64) float64 {
	pa, pb := struct{ w, leaks float64 }(a), struct{ w, leaks float64 }(b)
	la, lb := math.Log(pa.leaks), math.Log(pb.leaks)
	if la == lb {
		return pb.w
	}
	return pa.w + (math.Log(target)-la)*(pb.w-pa.w)/(lb-la)
}

// Window returns the window in force for the keys observed now: the
// fixed [Options.Window], or under [Options.AutoWindow] the window the
// engine sized. A key observed now is remembered for at least that long.
func (e *Engine) Window() time.Duration { return e.timing.Window() }

// snapshotOptions are the options a snapshot's header keeps: the persisted
// ones and, once the window changed, the window schedule
// (window_schedule, which older readers ignore), so that a state restored
// from a lone snapshot ([RestoreBackup]) forgets no key early.
func (e *Engine) snapshotOptions() []byte {
	changes := e.timing.Schedule().Changes()
	if len(changes) < 2 && e.timing.Window() == e.opts.Window {
		return e.opts.persisted().encode()
	}
	b, err := json.Marshal(struct {
		persisted
		WindowSchedule []rotate.WindowChange `json:"window_schedule"`
	}{e.opts.persisted(), changes})
	if err != nil {
		panic(err) // scalars and a slice of them: cannot fail
	}
	return b
}

// snapshotSchedule returns the window schedule a snapshot's header keeps
// (see snapshotOptions), as the store's metadata entry holds it; nil if
// none.
func snapshotSchedule(options []byte) ([]byte, error) {
	var h struct {
		WindowSchedule json.RawMessage `json:"window_schedule"`
	}
	if err := json.Unmarshal(options, &h); err != nil {
		return nil, fmt.Errorf("%w: snapshot options: %w", ErrCorrupt, err)
	}
	if len(h.WindowSchedule) == 0 || string(h.WindowSchedule) == "null" {
		return nil, nil
	}
	return h.WindowSchedule, nil
}
