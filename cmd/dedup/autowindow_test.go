package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// TestFilterWindowAuto runs `dedup filter --window auto` on event time
// over a stream whose duplicates come after an exponential delay of mean
// 2 min: the window widens from --window-min, each change is a stderr
// line, and fewer duplicates pass than under the fixed --window-min.
func TestFilterWindowAuto(t *testing.T) {
	base := time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(5, 5))
	type ev struct {
		at  time.Time
		key string
	}
	var evs []ev
	const rate, dur = 100, 40 * time.Minute
	for i := range int(rate * dur.Seconds()) {
		at := base.Add(time.Duration(i) * time.Second / rate)
		k := fmt.Sprintf("k%d", i)
		evs = append(evs, ev{at, k})
		if rng.Float64() < 0.02 {
			evs = append(evs, ev{at.Add(time.Duration(rng.ExpFloat64() * float64(2*time.Minute))), k})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
	var in strings.Builder
	for _, x := range evs {
		fmt.Fprintf(&in, "{\"id\":%q,\"ts\":%d}\n", x.key, x.at.UnixMilli())
	}
	distinct := int(rate * dur.Seconds())
	code, out, stderr := runCmd(t, in.String(), "filter", "--key", "id", "--time-field", "ts",
		"--window", "auto", "--window-min", "2m", "--window-max", "30m", "--max-leaks", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	changes := 0
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "dedup: engine: window ") {
			changes++
		}
	}
	if changes == 0 || !strings.Contains(stderr, "dedup: engine: window 2m0s -> ") {
		t.Fatalf("no window change logged: %s", stderr)
	}
	autoLeaks, autoLog := strings.Count(out, "\n")-distinct, stderr
	code, out, stderr = runCmd(t, in.String(), "filter", "--key", "id", "--time-field", "ts", "--window", "2m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	fixedLeaks := strings.Count(out, "\n") - distinct
	t.Logf("%d window changes; duplicates let through: %d auto, %d under a fixed 2m", changes, autoLeaks, fixedLeaks)
	t.Log(autoLog)
	if autoLeaks < 0 || autoLeaks*4 > fixedLeaks {
		t.Errorf("auto let %d duplicates through, fixed 2m %d: want under a quarter", autoLeaks, fixedLeaks)
	}
}

// TestWindowAutoFlags checks the usage errors of the auto window's flags:
// each names its flag.
func TestWindowAutoFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-leaks", "5"}, "--max-leaks: needs --window auto"},
		{[]string{"--window-max", "1h"}, "--window-max: needs --window auto"},
		{[]string{"--window", "auto", "--max-leaks", "-1"}, "--max-leaks"},
		{[]string{"--window", "auto", "--window-min", "1h", "--window-max", "1m"}, "--window-max"},
		{[]string{"--window", "auto", "--max-memory", "lots"}, "max-memory"},
		{[]string{"--window", "soon"}, "want a duration such as 5m, or auto"},
	} {
		code, _, stderr := runCmd(t, "", append([]string{"filter", "--key", "id"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// TestServeWindowAuto checks that dedup serve refuses --window auto,
// whose tables take a fixed window, rather than ignore it.
func TestServeWindowAuto(t *testing.T) {
	code, _, stderr := runCmd(t, "", "serve", "--window", "auto")
	if code != 2 || !strings.Contains(stderr, "--window auto: dedup serve takes a fixed --window") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCmd(t, "", "serve", "--max-leaks", "5")
	if code != 2 || !strings.Contains(stderr, "--max-leaks: needs --window auto") {
		t.Errorf("serve --max-leaks: exit %d, stderr %q", code, stderr)
	}
}

// TestWindowMetrics checks the window's metrics: the window in force, and
// under AutoWindow the target and the changes.
func TestWindowMetrics(t *testing.T) {
	eng, err := dedup.Open(dedup.Options{AutoWindow: &dedup.AutoWindow{Min: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	vals := engineMetricValues(eng.Stats())
	for name, want := range map[string]float64{
		"dedup_engine_window_seconds":        120,
		"dedup_engine_window_target_seconds": 0,
		"dedup_engine_window_changes_total":  0,
	} {
		if v, ok := vals[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
