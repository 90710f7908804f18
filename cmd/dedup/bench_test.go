package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup/internal/cputime"
)

// benchSize is the size of the generated NDJSON input of BenchmarkFilter:
// DEDUP_BENCH_SIZE (bytes, or with a K, M or G suffix), default 64M. The
// issue's figure is measured by hand with DEDUP_BENCH_SIZE=1G.
// DEDUP_BENCH_FILE keeps the generated file at that path and reuses it.
func benchSize(b *testing.B) int64 {
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

// genBenchInput writes about size bytes of clickstream events (~190 bytes
// each) with 20% redeliveries at distances from 1 to 1M events.
func genBenchInput(b *testing.B, path string, size int64) {
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

// BenchmarkFilter runs the whole `dedup filter` command, in-process, file
// to file, and reports MB/s of input (wall clock, and per CPU-second since
// the machine is shared). Targets: >= 300 MB/s probabilistic, >= 150 MB/s
// exact, on the 1 GB input.
func BenchmarkFilter(b *testing.B) {
	size := benchSize(b)
	in := os.Getenv("DEDUP_BENCH_FILE")
	if in == "" {
		in = filepath.Join(b.TempDir(), "bench.ndjson")
	}
	genBenchInput(b, in, size)
	fi, err := os.Stat(in)
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"probabilistic", []string{"--probabilistic"}},
		{"exact", nil},
		{"probabilistic-memory", []string{"--probabilistic", "--no-state"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			b.SetBytes(fi.Size())
			var cpu, wall time.Duration
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				args := []string{"filter", "--key", "event_id", "--in", in, "--out", filepath.Join(dir, "out.ndjson"),
					"--rate", "100000", "--progress", "never"}
				noState := false
				for _, a := range mode.args {
					if a == "--no-state" {
						noState = true
					} else {
						args = append(args, a)
					}
				}
				if !noState {
					args = append(args, "--state", filepath.Join(dir, "state"))
				}
				b.StartTimer()
				cpu0, t0 := cputime.Process(), time.Now()
				if code, _, stderr := runCmd(b, "", args...); code != 0 {
					b.Fatalf("exit status %d: %s", code, stderr)
				}
				cpu += cputime.Process() - cpu0
				wall += time.Since(t0)
				// Each run starts from the same machine state: the GB of
				// output of the runs before it, left behind, would still
				// be written back to the disk while this one runs.
				b.StopTimer()
				if err := os.RemoveAll(dir); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				b.StartTimer()
			}
			mb := float64(fi.Size()) / 1e6 * float64(b.N)
			b.ReportMetric(mb/wall.Seconds(), "MB/s-wall")
			b.ReportMetric(mb/cpu.Seconds(), "MB/cpu-s")
		})
	}
}

// BenchmarkReadExtract measures the command's own input path: reading,
// cutting lines and extracting keys, without the engine. It is the
// ceiling of the command on this input.
func BenchmarkReadExtract(b *testing.B) {
	size := min(benchSize(b), 256<<20)
	in := filepath.Join(b.TempDir(), "bench.ndjson")
	genBenchInput(b, in, size)
	fi, err := os.Stat(in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	x := mustExtractor(b, extractorConfig{format: "json", key: "event_id"})
	cpu0 := cputime.Process()
	for b.Loop() {
		f, err := os.Open(in)
		if err != nil {
			b.Fatal(err)
		}
		full := make(chan *batch, 3)
		free := make(chan *batch, 4)
		for range 4 {
			free <- &batch{}
		}
		rd := &reader{srcs: []source{{name: in, r: f, line: 1}}, x: x, chunk: defaultChunk, full: full, free: free, done: make(chan struct{})}
		go rd.run()
		keys := 0
		for bt := range full {
			keys += len(bt.keys)
			free <- bt
		}
		f.Close()
		if keys == 0 {
			b.Fatal("no keys")
		}
	}
	reportCPU(b, cpu0, fi.Size()*int64(b.N))
}
