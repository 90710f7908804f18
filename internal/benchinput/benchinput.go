// Package benchinput generates the NDJSON input of the stream filter's
// benchmarks (cmd/dedup's BenchmarkFilter, stream's BenchmarkReadExtract)
// and reports their CPU throughput.
package benchinput

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup/internal/cputime"
)

// Size is the size of the generated NDJSON input of the benchmarks:
// DEDUP_BENCH_SIZE (bytes, or with a K, M or G suffix), default 64M. The
// issue's figure is measured by hand with DEDUP_BENCH_SIZE=1G.
// DEDUP_BENCH_FILE keeps the generated file at that path and reuses it.
func Size(b testing.TB) int64 {
	s := os.Getenv("DEDUP_BENCH_SIZE")
	if s == "" {
		return 64 << 20
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("DEDUP_BENCH_SIZE=%q: want a size like 64M or 1G", os.Getenv("DEDUP_BENCH_SIZE"))
	}
	return n * mult
}

// Write writes about size bytes of clickstream events (~190 bytes
// each) with 20% redeliveries at distances from 1 to 1M events.
func Write(b testing.TB, path string, size int64) {
	if fi, err := os.Stat(path); err == nil && fi.Size() >= size {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	var written int64
	var line []byte
	for i := int64(0); written < size; i++ {
		id := i
		if r.IntN(5) == 0 && i > 0 {
			scale := []int64{10, 1000, 100000, 1000000}[r.IntN(4)]
			id = max(0, i-1-r.Int64N(scale))
		}
		line = fmt.Appendf(line[:0],
			`{"event_id":"%08x-7425-40de-944b-%012x","ts":"2026-11-29T10:00:%02d.%03dZ","user":{"id":%d,"country":"DE"},"seq":%d,"type":"click","url":"https://example.com/p/%d?ref=abc"}`+"\n",
			id>>16, id*2654435761%(1<<48), i%60, i%1000, id%1000003, id%97, id%10007)
		n, err := w.Write(line)
		if err != nil {
			b.Fatal(err)
		}
		written += int64(n)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// ReportCPU reports bytes per CPU-second of the process since cpu0 (a
// [cputime.Process] reading), as MB/cpu-s: the machine is shared, and the
// wall clock alone says little.
func ReportCPU(b *testing.B, cpu0 time.Duration, bytes int64) {
	if d := cputime.Process() - cpu0; d > 0 {
		b.ReportMetric(float64(bytes)/1e6/d.Seconds(), "MB/cpu-s")
	}
}
