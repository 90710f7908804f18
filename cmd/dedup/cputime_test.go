package main

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. The machine the
// benchmarks run on is shared: wall-clock MB/s under load understates the
// code's speed, so benchmarks also report MB per CPU-second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports MB/cpu-s for bytes processed since cpu0 was taken.
func reportCPU(b *testing.B, cpu0 time.Duration, bytes int64) {
	if d := cpuTime() - cpu0; d > 0 {
		b.ReportMetric(float64(bytes)/1e6/d.Seconds(), "MB/cpu-s")
	}
}
