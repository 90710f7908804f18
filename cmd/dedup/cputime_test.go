package main

import (
	"testing"
	"time"

	"github.com/streamdedup/dedup/internal/cputime"
)

// reportCPU reports MB/cpu-s for bytes processed since cpu0 was taken with
// [cputime.Process]. The machine the benchmarks run on is shared:
// wall-clock MB/s under load understates the code's speed, so benchmarks
// also report MB per CPU-second.
func reportCPU(b *testing.B, cpu0 time.Duration, bytes int64) {
	if d := cputime.Process() - cpu0; d > 0 {
		b.ReportMetric(float64(bytes)/1e6/d.Seconds(), "MB/cpu-s")
	}
}
