//go:build linux

package cputime

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD of <sys/resource.h>, which the syscall
// package does not name.
const rusageThread = 1

// Thread returns the CPU time (user and system) the calling OS thread has
// used so far, and whether it was measured (Linux only). Lock the goroutine
// to its thread with [runtime.LockOSThread] between two readings.
func Thread() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
