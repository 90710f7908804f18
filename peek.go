package dedup

// Peek returns the verdict [Engine.Observe] would return for key now,
// without observing it: a key Peek calls [New] stays unknown (the next
// Observe of it is New, and no Peek ever makes a key [InFlight]), and
// Peek changes no verdict count in [Stats]. It reads what Observe reads:
// the keys in flight, the filters and, in exact mode for a filter hit,
// the keys of recent commits held in memory and the exact store (the
// lookups count in Stats.StoreLookups and Stats.FalsePositives).
//
// Peek takes only key's shard lock, as Observe does, and is safe for use
// concurrently with every other method; the verdict may be out of date
// by the time it returns if other calls observe, forget or commit the
// key meanwhile. A key Observe would refuse with [ErrTooManyInFlight] is
// New to Peek. Peek refuses the keys Observe refuses ([ErrEmptyKey],
// [ErrKeyTooLarge]), and returns [ErrClosed] after Close.
func (e *Engine) Peek(key []byte) (Verdict, error) {
	h, s, err := e.lockKey(key)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	now := e.opts.Now()
	// Observe sees only the generations live at now; dropping the expired
	// ones changes no verdict, Observe would do it anyway.
	s.ring.Advance(now)
	if s.undone != nil && s.doneInFlight(h, key, e.exactMode) {
		return Duplicate, nil // Done: see Engine.Done
	}
	if s.inFlight(h, key, e.exactMode) {
		return InFlight, nil
	}
	if !s.ring.Contains(h) {
		return New, nil
	}
	if !e.exactMode {
		return Duplicate, nil
	}
	found, err := e.committed(s, h, key)
	if err != nil {
		return 0, err
	}
	if found {
		return Duplicate, nil
	}
	s.falsePositives++
	return New, nil
}
