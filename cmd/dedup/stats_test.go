package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

// fuseState makes a Filter "fuse" state in dir whose four generations of an
// hour end with the current one: the oldest sealed, the next left blocked
// (it was the newest when the first engine closed, so a reopen has no
// spool to seal it from), the third sealed by the second engine, and the
// newest blocked.
func fuseState(t *testing.T, dir string) {
	t.Helper()
	clk := testclock.New(time.Now().Truncate(time.Hour).Add(-3 * time.Hour))
	opts := dedup.Options{Dir: dir, Filter: "fuse", Window: 4 * time.Hour, Generations: 4, Shards: 2, Now: clk.Now}
	n := 0
	feed := func(e *dedup.Engine) {
		for range 500 {
			if _, err := e.Observe(fmt.Appendf(nil, "k%d", n)); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		e, err := dedup.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		feed(e)
		clk.Advance(time.Hour)
		feed(e)
		e.Stats() // seals the generation before
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
}

// TestStatsFuseKinds: dedup stats of a fuse state names each generation's
// kind and whether it is sealed into a static filter, the seals and the
// observed FP (not measured: stats observes nothing), in text and JSON. It
// does not say "live", the word snapshot inspect uses for a generation
// whose segments are not final (TestSnapshotInspectFinal): a generation
// can be final in a snapshot and not sealed.
func TestStatsFuseKinds(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	fuseState(t, state)
	code, out, stderr := runCmd(t, "", "stats", state)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(out, " live") {
		t.Errorf("stats says live, which snapshot inspect uses for not final:\n%s", out)
	}
	var kinds []string
	for _, m := range regexp.MustCompile(`(?m)^  gen .*Z  ([a-z+]+, [a-z ]+?)  +\d+ keys`).FindAllStringSubmatch(out, -1) {
		kinds = append(kinds, m[1])
	}
	want := []string{"fuse, sealed", "blocked, not sealed", "fuse, sealed", "blocked, newest"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("generations' kinds %q, want %q:\n%s", kinds, want, out)
	}
	for _, w := range []string{
		"generations      4 in the window",
		"sealed: rebuilt as a static fuse filter",
		"not sealed: was the newest at the last snapshot, or its seal failed",
		"fuse seals       0 done, 0 failed since the engine opened",
		"observed FP      not measured here (stats observes no keys)",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in:\n%s", w, out)
		}
	}

	code, out, stderr = runCmd(t, "", "stats", "--json", state)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Engine struct {
			ObservedFPSamples *uint64          `json:"observed_fp_samples"`
			ObservedFPRate    *float64         `json:"observed_fp_rate"`
			Seals             *uint64          `json:"seals"`
			SealErrors        *uint64          `json:"seal_errors"`
			Generations       []map[string]any `json:"generation_stats"`
		} `json:"engine"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	en := rep.Engine
	if en.ObservedFPSamples == nil || *en.ObservedFPSamples != 0 || en.ObservedFPRate != nil || en.Seals == nil || en.SealErrors == nil {
		t.Errorf("observed FP samples %v rate %v (want 0, null), seals %v errors %v:\n%s", en.ObservedFPSamples, en.ObservedFPRate, en.Seals, en.SealErrors, out)
	}
	var got []string
	for _, g := range en.Generations {
		got = append(got, fmt.Sprintf("%v %v", g["kind"], g["sealed"]))
	}
	if w := "[fuse true blocked false fuse true blocked false]"; fmt.Sprint(got) != w {
		t.Errorf("JSON kinds and sealed %v, want %s", got, w)
	}
}

// TestFilterStatsObservedFP: the end-of-run summary of dedup filter
// --stats gives the observed FP: measured on a run's new keys, and said
// not measured when no sampled key came.
func TestFilterStatsObservedFP(t *testing.T) {
	var in strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&in, "k%d\n", i)
	}
	code, _, stderr := runCmd(t, in.String(), "filter", "--format", "lines", "--stats")
	m := regexp.MustCompile(`observed FP     [0-9.e-]+: the filters wrongly matched \d+ of (\d+) sampled new keys`).FindStringSubmatch(stderr)
	if code != 0 || m == nil || m[1] == "0" {
		t.Errorf("exit %d, no observed FP measured:\n%s", code, stderr)
	}
	code, _, stderr = runCmd(t, "", "filter", "--format", "lines", "--stats")
	if code != 0 || !strings.Contains(stderr, "observed FP     not measured yet") {
		t.Errorf("empty input: exit %d, want observed FP not measured yet:\n%s", code, stderr)
	}
}

// TestStatsServeState: dedup stats DIR after dedup serve --state DIR said
// "exact: directory holds files that are not an exact store", as if DIR
// were damaged: serve keeps one state per table, in DIR/<table>/engine.
// Stats now says so and names the directories to give it.
func TestStatsServeState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	addr, stop := serveInProcess(t, "--state", dir)
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	if err := c.Do(t.Context(), "SET", "k", "1", "NX").Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if code, stderr := stop(); code != 0 {
		t.Fatalf("serve: exit %d\n%s", code, stderr)
	}
	engine := filepath.Join(dir, "default", "engine")
	for _, d := range []string{dir, filepath.Join(dir, "default")} {
		code, _, stderr := runCmd(t, "", "stats", d)
		if code == 0 || !strings.Contains(stderr, "dedup serve") || !strings.Contains(stderr, "dedup stats "+engine) {
			t.Errorf("stats %s: exit %d, %s; want an error naming dedup serve and %s", d, code, stderr, engine)
		}
	}
	if code, out, stderr := runCmd(t, "", "stats", engine); code != 0 || !strings.Contains(out, "keys             1 in the filters") {
		t.Errorf("stats %s: exit %d\n%s%s", engine, code, out, stderr)
	}
}
