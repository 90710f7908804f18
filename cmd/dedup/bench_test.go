package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/streamdedup/dedup/internal/benchinput"
	"github.com/streamdedup/dedup/internal/cputime"
)

// BenchmarkFilter runs the whole `dedup filter` command, in-process, file
// to file, and reports MB/s of input (wall clock, and per CPU-second since
// the machine is shared). Targets: >= 300 MB/s probabilistic, >= 150 MB/s
// exact, on the 1 GB input.
func BenchmarkFilter(b *testing.B) {
	size := benchinput.Size(b)
	in := os.Getenv("DEDUP_BENCH_FILE")
	if in == "" {
		in = filepath.Join(b.TempDir(), "bench.ndjson")
	}
	benchinput.Write(b, in, size)
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
