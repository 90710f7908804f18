package main

import (
	"runtime/debug"
	"time"
)

// idleRelease decides when dedup serve gives the Go heap's free pages back
// to the system: once, at the first tick without a command after ticks
// with some. A burst of writes leaves the heap at its peak (the in-flight
// sets, the commit batches), and the Go runtime returns the pages it no
// longer uses only slowly, so the resident set stays there while the
// server idles: measured after 100k SET NX EX from redis-benchmark
// (-P 16 -c 8), 285 B/key of growth before the release and 73 B/key after
// it (redis-server 140). A release during traffic would cost a collection
// per tick; one per pause costs nothing the clients wait for.
type idleRelease struct {
	last     uint64 // commands served at the last tick
	released bool   // the pages were given back since the last command
}

// tick reports, given the commands served so far, whether to give the
// free pages back now.
func (r *idleRelease) tick(commands uint64) bool {
	busy := commands != r.last
	r.last = commands
	if busy {
		r.released = false
		return false
	}
	if r.released {
		return false
	}
	r.released = true
	return true
}

// releaseWhenIdle gives the heap's free pages back (debug.FreeOSMemory),
// and the C allocator's (trimMalloc), at each pause in the commands counted by commands, checking every
// interval, until stop is closed.
func releaseWhenIdle(commands func() uint64, interval time.Duration, stop <-chan struct{}) {
	r := idleRelease{last: commands(), released: true}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if r.tick(commands()) {
				debug.FreeOSMemory()
				trimMalloc()
			}
		}
	}
}
