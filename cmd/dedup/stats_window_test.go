package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// statsAutoWindow is engine.auto_window of `dedup stats --json`.
type statsAutoWindow struct {
	WindowSeconds float64    `json:"window_seconds"`
	Auto          bool       `json:"auto"`
	TargetSeconds float64    `json:"target_seconds"`
	TargetBytes   uint64     `json:"target_bytes"`
	Changes       uint64     `json:"changes"`
	LastChange    *time.Time `json:"last_change"`
	Reason        string     `json:"reason"`
}

// statsJSON runs `dedup stats --json dir` and returns engine.auto_window
// and engine.saved_window_advice.measured_at (zero if none).
func statsJSON(t *testing.T, dir string) (*statsAutoWindow, time.Time) {
	t.Helper()
	code, out, stderr := runCmd(t, "", "stats", "--json", dir)
	if code != 0 {
		t.Fatalf("stats --json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Engine struct {
			Auto  *statsAutoWindow `json:"auto_window"`
			Saved *struct {
				MeasuredAt time.Time `json:"measured_at"`
			} `json:"saved_window_advice"`
		} `json:"engine"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	if rep.Engine.Saved != nil {
		at = rep.Engine.Saved.MeasuredAt
	}
	return rep.Engine.Auto, at
}

// TestStatsShowsAutoWindow: after `dedup filter --window auto --state DIR`
// widened its window, `dedup stats DIR` shows the window in force, its
// target, last change and reason, in text and in --json as
// engine.auto_window, and leaves that window in force (a second stats
// shows it again).
func TestStatsShowsAutoWindow(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(7, 7))
	type ev struct {
		at  time.Time
		key string
	}
	var evs []ev
	const rate, dur = 100, 12 * time.Minute
	for i := range int(rate * dur.Seconds()) {
		at := base.Add(time.Duration(i) * time.Second / rate)
		k := fmt.Sprintf("k%d", i)
		evs = append(evs, ev{at, k})
		if rng.Float64() < 0.03 {
			evs = append(evs, ev{at.Add(time.Duration(rng.ExpFloat64() * float64(2*time.Minute))), k})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
	var in strings.Builder
	for _, x := range evs {
		fmt.Fprintf(&in, "{\"id\":%q,\"ts\":%d}\n", x.key, x.at.UnixMilli())
	}
	code, _, stderr := runCmd(t, in.String(), "filter", "--key", "id", "--time-field", "ts", "--state", dir, "--out", dir+"/out",
		"--window", "auto", "--window-min", "2m", "--window-max", "30m", "--max-leaks", "100")
	if code != 0 || !strings.Contains(stderr, "dedup: engine: window 2m0s -> ") {
		t.Fatalf("filter: exit %d, no window change: %s", code, stderr)
	}
	for range 2 {
		code, out, stderr := runCmd(t, "", "stats", dir)
		if code != 0 || !strings.Contains(out, "in force (auto): target ") || strings.Contains(out, "window           2m0s in force") {
			t.Fatalf("stats: exit %d, no widened auto window:\n%s%s", code, out, stderr)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "window ") {
				t.Log(l)
			}
		}
		a, _ := statsJSON(t, dir)
		if a == nil || !a.Auto || a.WindowSeconds <= 120 || a.TargetSeconds <= 0 || a.Changes == 0 || a.LastChange == nil || a.Reason == "" {
			t.Fatalf("engine.auto_window = %+v, want the widened window with its target, last change and reason", a)
		}
		if !strings.Contains(out, a.LastChange.Format(time.RFC3339)) || !strings.Contains(out, "reason: "+a.Reason) {
			t.Fatalf("stats text lacks the last change %v or reason %q:\n%s", a.LastChange, a.Reason, out)
		}
	}
	// dedup backup and dedup restore keep the window and its sizing.
	want, _ := statsJSON(t, dir)
	backup, restored := filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "r")
	if code, _, stderr := runCmd(t, "", "backup", dir, backup); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "restore", backup, restored); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	got, _ := statsJSON(t, restored)
	if got == nil || got.WindowSeconds != want.WindowSeconds || got.Reason != want.Reason || !got.Auto {
		t.Fatalf("restored engine.auto_window = %+v, want %+v", got, want)
	}
}

// TestStatsAdviceWithoutStatsFlag: a `dedup filter --state DIR` job
// without --stats still leaves the advice it measured with the state, and
// `dedup stats DIR` shows it with its time; its window is shown as fixed.
func TestStatsAdviceWithoutStatsFlag(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC)
	var in strings.Builder
	for i := range 3000 {
		at := base.Add(time.Duration(i) * 200 * time.Millisecond)
		fmt.Fprintf(&in, "{\"id\":\"k%d\",\"ts\":%d}\n", i, at.UnixMilli())
		if i%4 == 0 && i >= 100 {
			fmt.Fprintf(&in, "{\"id\":\"k%d\",\"ts\":%d}\n", i-100, at.UnixMilli())
		}
	}
	start := time.Now()
	code, _, stderr := runCmd(t, in.String(), "filter", "--key", "id", "--time-field", "ts", "--window", "1m", "--state", dir, "--out", dir+"/out")
	if code != 0 {
		t.Fatalf("filter: exit %d: %s", code, stderr)
	}
	code, out, stderr := runCmd(t, "", "stats", dir)
	if code != 0 || !strings.Contains(out, "(saved: measured by a running engine ") {
		t.Fatalf("stats: exit %d, no saved advice:\n%s%s", code, out, stderr)
	}
	if !strings.Contains(out, "window           1m0s in force (fixed)") {
		t.Fatalf("stats: no fixed window line:\n%s", out)
	}
	a, at := statsJSON(t, dir)
	if at.Before(start.Add(-time.Second)) || time.Since(at) > time.Minute {
		t.Fatalf("engine.saved_window_advice.measured_at = %v, want the filter job's time (started %v)", at, start)
	}
	if a == nil || a.Auto || a.WindowSeconds != 60 || a.Reason != "fixed" {
		t.Fatalf("engine.auto_window = %+v, want the fixed 1m", a)
	}
}
