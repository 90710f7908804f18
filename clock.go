package dedup

import "time"

// The event clock: under Options.EventTime the engine's clock is the
// latest event time observed (ObserveAt, ObserveBatchAt), never stepping
// back, and starts after a restore at the newest generation restored.

// initClock makes, under EventTime, the event clock the engine's clock.
func (e *Engine) initClock() {
	if e.opts.EventTime {
		e.opts.Now = e.eventNow
	}
}

// startEventClock starts the event clock, after a restore, at the start of
// the newest generation restored, so that the first events do not find an
// engine at the epoch.
func (e *Engine) startEventClock() {
	if !e.opts.EventTime {
		return
	}
	if g := e.newestGen.Load(); g > 0 {
		e.advanceClock(e.timing.Start(g))
	}
}

// eventNow is the engine's clock under EventTime.
func (e *Engine) eventNow() time.Time { return time.Unix(0, e.clock.Load()) }

// advanceClock moves the event clock to t if t is later.
func (e *Engine) advanceClock(t time.Time) {
	ns := t.UnixNano()
	for {
		c := e.clock.Load()
		if ns <= c || e.clock.CompareAndSwap(c, ns) {
			return
		}
	}
}
