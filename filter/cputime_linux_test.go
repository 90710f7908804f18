//go:build linux

package filter

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time of the calling OS thread (lock the
// goroutine to its thread first). On a shared, oversubscribed machine it
// excludes the time the benchmark sat descheduled, which wall-clock ns/op
// does not.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
