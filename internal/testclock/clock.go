// Package testclock is a settable clock for tests and simulations.
package testclock

import (
	"sync/atomic"
	"time"
)

// Clock is a manually driven clock, safe for concurrent use.
type Clock struct{ ns atomic.Int64 }

// New returns a clock reading t.
func New(t time.Time) *Clock {
	c := &Clock{}
	c.ns.Store(t.UnixNano())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock by d (which may be negative) and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time { return time.Unix(0, c.ns.Add(int64(d))) }

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }
