package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStatsShowsSavedAdvice: the window advice a dedup filter --stats job
// measured is kept with its state, and dedup stats DIR shows it, in text
// and in --json as engine.saved_window_advice, with when it was measured.
func TestStatsShowsSavedAdvice(t *testing.T) {
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
	code, _, stderr := runCmd(t, in.String(), "filter", "--key", "id", "--time-field", "ts", "--window", "1m", "--state", dir, "--stats", "--out", dir+"/out")
	if code != 0 || !strings.Contains(stderr, "window leaks") {
		t.Fatalf("filter: exit %d: %s", code, stderr)
	}
	code, out, stderr := runCmd(t, "", "stats", dir)
	if code != 0 || !strings.Contains(out, "(saved: measured by a running engine ") {
		t.Fatalf("stats: exit %d, no saved advice:\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCmd(t, "", "stats", "--json", dir)
	if code != 0 {
		t.Fatalf("stats --json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Engine struct {
			Saved *struct {
				MeasuredAt time.Time       `json:"measured_at"`
				Advice     json.RawMessage `json:"advice"`
			} `json:"saved_window_advice"`
		} `json:"engine"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if s := rep.Engine.Saved; s == nil || time.Since(s.MeasuredAt) > time.Minute || !strings.Contains(string(s.Advice), "leaks_per_million") {
		t.Fatalf("engine.saved_window_advice: %+v\n%s", s, out)
	}
}
