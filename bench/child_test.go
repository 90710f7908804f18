package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
)

// childArg makes the test binary a [RunChild] process, as cmd/dedupbench's
// hidden "child" subcommand does.
const childArg = "dedupbench-test-child"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		if err := RunChild(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCompareInChildProcesses runs targets each in a process of its own and
// checks that the memory reported is that process's: a Go map of 150k
// string keys holds well over 40 bytes per key, so an RSS measured in the
// wrong process (the harness, which holds nothing) reads near zero.
func TestCompareInChildProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process memory is read from Linux's /proc")
	}
	cfg := tinyCompare([]string{BaselineMap})
	cfg.Modes, cfg.Filters = []string{"probabilistic"}, []string{"blocked"}
	cfg.SkipSweep, cfg.SkipScale = true, false
	cfg.ScaleKeys = []int{150_000}
	cfg.ScaleTargets = []string{"exact/blocked", BaselineMap}
	cfg.Dir = t.TempDir()
	cfg.Child = []string{os.Args[0], childArg}
	res, err := Compare(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || len(res.Scale) != 2 {
		t.Fatalf("%d rows and %d scale rows, want 2 and 2", len(res.Rows), len(res.Scale))
	}
	for _, r := range append(res.Rows, res.Scale...) {
		if r.Process != "own process" || r.PeakRSS == 0 || r.PeakGrowth < r.RSSGrowth {
			t.Errorf("%s: process %q, peak %d, peak growth %d, growth %d", r.Name, r.Process, r.PeakRSS, r.PeakGrowth, r.RSSGrowth)
		}
		if r.DupsMissed != 0 {
			t.Errorf("%s missed %d duplicates", r.Name, r.DupsMissed)
		}
	}
	for _, r := range res.Scale {
		// The engine counts keys as its filters do: a key that meets a
		// false positive on insert is not counted twice, nor once.
		if r.Events != 150_000 || r.Keys > 150_000 || r.Keys < 149_700 {
			t.Errorf("%s at scale: %d keys held of %d events, want 150000", r.Name, r.Keys, r.Events)
		}
		if r.Name == "go map + expiry" && r.RSSPerKey < 40 {
			t.Errorf("go map holds %.1f B/key of RSS: not the process holding the keys", r.RSSPerKey)
		}
		if r.Name == "engine exact/blocked" && (r.EngineBytesPerKey == 0 || r.DiskPerKey == 0) {
			t.Errorf("engine at scale: %.1f B/key own count, %.1f B/key disk", r.EngineBytesPerKey, r.DiskPerKey)
		}
	}
}
