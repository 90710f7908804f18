package cputime

import "time"

// spin burns CPU on the calling goroutine until read reports at least want
// more than it did at the start, or 10 s of wall-clock time pass; it
// returns what read gained.
func spin(read func() time.Duration, want time.Duration) time.Duration {
	start, deadline := read(), time.Now().Add(10*time.Second)
	x := uint64(1)
	for read()-start < want && time.Now().Before(deadline) {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink = x
	return read() - start
}

var sink uint64
