//go:build !linux

package cputime

import "time"

// Thread returns the CPU time (user and system) the calling OS thread has
// used so far, and whether it was measured (Linux only). Lock the goroutine
// to its thread with [runtime.LockOSThread] between two readings.
func Thread() (time.Duration, bool) { return 0, false }
