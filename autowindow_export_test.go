package dedup

import "time"

// SetWindowAt is the controller's window change, for tests.
func (e *Engine) SetWindowAt(w time.Duration, now time.Time) (bool, error) {
	return e.setWindow(w, now, false)
}
