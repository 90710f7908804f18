package bench

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func tinyCompare(baselines []string) CompareConfig {
	return CompareConfig{
		Stream:      StreamOptions{Events: 20000, Rate: 5000},
		Window:      2 * time.Second,
		Baselines:   baselines,
		Dir:         "",
		MemorySweep: []float64{0.01, 0.001},
		SweepKeys:   5000,
		SkipScale:   true,
	}
}

// TestCompareTiny runs every engine configuration and the in-process
// baselines on a tiny stream and checks the ground truth: no duplicate
// inside the window is missed, exact mode drops no real event.
func TestCompareTiny(t *testing.T) {
	cfg := tinyCompare([]string{BaselinePebble, BaselineMap, BaselineBloom, BaselineSBBF})
	cfg.Dir = t.TempDir()
	res, err := Compare(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 10 {
		t.Fatalf("%d rows, want 6 engine + 4 baselines", len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Events != 20000 || r.Duplicates == 0 || r.Keys == 0 {
			t.Errorf("%s: events %d, duplicates %d, keys %d", r.Name, r.Events, r.Duplicates, r.Keys)
		}
		if r.DupsMissed != 0 {
			t.Errorf("%s missed %d duplicates inside the window", r.Name, r.DupsMissed)
		}
		if strings.Contains(r.Name, "exact") || r.Name == "pebble alone" || r.Name == "go map + expiry" {
			if r.FalseDrops != 0 {
				t.Errorf("%s dropped %d real events", r.Name, r.FalseDrops)
			}
		}
	}
	if res.Reference != "pebble alone" {
		t.Errorf("reference %q", res.Reference)
	}
	if len(res.Sweep) != 4*2 {
		t.Errorf("%d sweep points, want 8", len(res.Sweep))
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "engine exact/blocked") {
		t.Errorf("table lacks the engine row:\n%s", buf.String())
	}
	if _, err := PlotMemory(res.Sweep, res.Machine, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// TestCompareRedis runs the Redis baseline against a real redis-server.
func TestCompareRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH (apt-get install redis-server): Redis baseline not tested")
	}
	cfg := tinyCompare([]string{BaselineRedis})
	cfg.Modes, cfg.SkipSweep = []string{}, true
	res, err := Compare(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	if r.Skipped != "" || r.DupsMissed != 0 || r.FalseDrops != 0 || r.Keys == 0 {
		t.Errorf("redis row: %+v", r)
	}
	// redis-server is a process of its own even when the harness runs the
	// client in-process: its resident set grows with the keys it holds
	// (Redis keeps well over 40 bytes per key).
	if r.Process != "redis-server" || r.RSSPerKey < 40 || r.PeakRSS < r.RSSGrowth {
		t.Errorf("redis row's memory: process %q, %.1f B/key RSS, peak %d, growth %d", r.Process, r.RSSPerKey, r.PeakRSS, r.RSSGrowth)
	}
}

func TestLoadTiny(t *testing.T) {
	cfg := LoadConfig{Rates: []float64{2000, 5000}, Duration: 1500 * time.Millisecond, Dir: t.TempDir(),
		Interval: 500 * time.Millisecond}
	res, err := Load(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 2 {
		t.Fatalf("%d steps", len(res.Steps))
	}
	for _, s := range res.Steps {
		if s.Events == 0 || s.Batches == 0 || s.P50 <= 0 || s.P999 < s.P50 || len(s.Samples) == 0 || s.Keys == 0 {
			t.Errorf("step %+v", s)
		}
		if s.DupsMissed != 0 || s.FalseDrops != 0 {
			t.Errorf("rate %.0f: %d missed, %d false drops in exact mode", s.Target, s.DupsMissed, s.FalseDrops)
		}
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf, true); err != nil {
		t.Fatal(err)
	}
	if _, err := PlotLoad(res, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// TestLoadFalseDropsAreNotMissedDuplicates runs a probabilistic engine at
// a loose false-positive target, sized for far fewer keys than come (so
// its filters are full and chained however few events a slow machine
// offers): originals are dropped, and their copies pass. A copy whose
// original was dropped is the event's first delivery, so passing it is not
// a missed duplicate; the engine never misses one whose original went
// through.
func TestLoadFalseDropsAreNotMissedDuplicates(t *testing.T) {
	cfg := LoadConfig{Rates: []float64{40000}, Duration: 1500 * time.Millisecond, Dir: t.TempDir(), Interval: 500 * time.Millisecond}
	cfg.Engine.Probabilistic, cfg.Engine.FalsePositiveRate, cfg.Engine.ExpectedRate = true, 0.2, 2
	cfg.Stream.DuplicateFraction = 0.5
	cfg.Stream.Delay = DelayOptions{Kind: DelayExponential, Mean: 400 * time.Millisecond}
	res, err := Load(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Steps[0]
	if s.FalseDrops == 0 || s.Duplicates == 0 {
		t.Fatalf("no false drops (%d) or duplicates (%d): the test does not exercise its case", s.FalseDrops, s.Duplicates)
	}
	if s.DupsMissed != 0 {
		t.Errorf("%d of %d duplicates counted as missed in probabilistic mode (%d false drops)", s.DupsMissed, s.Duplicates, s.FalseDrops)
	}
}
