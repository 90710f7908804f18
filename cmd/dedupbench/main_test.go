package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	// The compare runs below start this test binary as their child
	// processes, as dedupbench starts itself.
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "dedupbench:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCommands runs every subcommand at a tiny scale, as CI does.
func TestCommands(t *testing.T) {
	plots := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"headline", []string{"--events", "5000", "--baselines", "map,bloom,pebble", "--sweep-keys", "2000", "--scale-keys", "20000", "--scale-targets", "exact/blocked,map", "--dir", t.TempDir()}, "engine exact/blocked"},
		{"compare-json", []string{"compare", "--json", "--events", "5000", "--modes", "probabilistic", "--filters", "blocked", "--baselines", "map", "--no-sweep", "--scale-keys", "", "--in-process"}, `"events_per_sec"`},
		{"compare-plot", []string{"compare", "--events", "3000", "--modes", "exact", "--filters", "bloom", "--baselines", "map", "--sweep", "0.01,0.001", "--sweep-keys", "2000", "--scale-keys", "10000", "--scale-targets", "probabilistic/blocked", "--plot", plots}, "bytes/key"},
		{"simulate", []string{"simulate", "--scale", "0.005", "--measure", "20m", "--bimodal-scale", "0.0003", "--replay-min", "20m", "--replay-max", "1h"}, "leaks per million requests"},
		{"load", []string{"load", "--rate", "1000:3000:2", "--duration", "1s", "--series", "--plot", plots, "--dir", t.TempDir()}, "achieved/s"},
		{"advisor-plot", []string{"advisor", "--quiet", "--delay", "exponential,mixture", "--windows", "2m,4m", "--duration", "10m", "--rate", "200", "--plot", plots}, "true leaks/M"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := run(context.Background(), tc.args, &out, &errb); err != nil {
				t.Fatalf("%v\nstderr: %s", err, errb.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out.String())
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") && !json.Valid(out.Bytes()) {
				t.Fatalf("invalid JSON:\n%s", out.String())
			}
		})
	}
	for _, f := range []string{"headline.svg", "headline.png", "memory_scale.svg", "memory_per_key.svg", "memory_per_key.png", "load_throughput.svg", "load_latency.png", "advisor.svg", "advisor.png"} {
		if fi, err := os.Stat(filepath.Join(plots, f)); err != nil || fi.Size() == 0 {
			t.Errorf("chart %s: %v", f, err)
		}
	}
}

// TestFilterAgainstAwk runs dedupbench filter with the real dedup binary
// and awk: both must keep exactly the distinct events (FilterCmd checks it)
// and report a peak RSS.
func TestFilterAgainstAwk(t *testing.T) {
	if _, err := exec.LookPath("awk"); err != nil {
		t.Skip("awk is not on PATH")
	}
	dedupBin := filepath.Join(t.TempDir(), "dedup")
	if out, err := exec.Command("go", "build", "-o", dedupBin, "../dedup").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/dedup: %v\n%s", err, out)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"filter", "--lines", "20000", "--dedup", dedupBin, "--json"}, &out, &errb); err != nil {
		t.Fatalf("%v\nstderr: %s", err, errb.String())
	}
	var res struct {
		Distinct int `json:"distinct_keys"`
		Rows     []struct {
			Tool     string `json:"tool"`
			LinesOut int    `json:"lines_out"`
			PeakRSS  uint64 `json:"peak_rss"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Distinct < 18000 {
		t.Fatalf("result %+v", res)
	}
	for _, r := range res.Rows {
		if r.LinesOut != res.Distinct || r.PeakRSS < 1<<20 {
			t.Errorf("%s: %d lines kept of %d distinct, peak RSS %d", r.Tool, r.LinesOut, res.Distinct, r.PeakRSS)
		}
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"simulate", "--mode", "fuzzy"},
		{"compare", "--baselines", "memcached", "--events", "100", "--no-sweep", "--modes", ""},
		{"compare", "--scale-targets", "exact", "--events", "100", "--no-sweep", "--modes", "", "--baselines", ""},
		{"compare", "--scale-keys", "0", "--events", "100", "--no-sweep"},
		{"load", "--rate", "abc"},
		{"filter", "--lines", "-5"},
		{"idem", "--upstream-latency", "-5ms"},
		{"idem", "--upstream-workers", "-1"},
		{"idem-target", "--kind", "redis"},
		{"idem-target", "--kind", "memory"},
		{"idem-target", "--kind", "constant", "--body", "-1"},
		{"serve", "--cluster-nodes", "1"},
	} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestServeCluster: `dedupbench serve --cluster-nodes 3` runs one dedup
// node, three, and a Redis Cluster of three (when redis-server and redis-cli
// are on PATH, and leaves that row out cleanly when they are not), and
// every row holds the keys sent.
func TestServeCluster(t *testing.T) {
	dedupBin := filepath.Join(t.TempDir(), "dedup")
	if out, err := exec.Command("go", "build", "-o", dedupBin, "../dedup").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/dedup: %v\n%s", err, out)
	}
	_, errS := exec.LookPath("redis-server")
	_, errC := exec.LookPath("redis-cli")
	for _, withRedis := range []bool{errS == nil && errC == nil, false} {
		if !withRedis {
			t.Setenv("PATH", t.TempDir()) // no redis-server
		}
		var out, errb bytes.Buffer
		if err := run(context.Background(), []string{"serve", "--cluster-nodes", "3", "-n", "3000", "--dedup-bin", dedupBin, "--json"}, &out, &errb); err != nil {
			t.Fatalf("%v\nstderr: %s", err, errb.String())
		}
		var res struct {
			Rows []struct {
				Target string  `json:"target"`
				Nodes  int     `json:"nodes"`
				Keys   uint64  `json:"keys"`
				Ops    float64 `json:"ops_per_sec"`
			} `json:"cluster"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		want := 2
		if withRedis {
			want = 3
		}
		if len(res.Rows) != want {
			t.Fatalf("redis %v: %d rows, want %d: %s", withRedis, len(res.Rows), want, out.String())
		}
		for _, r := range res.Rows {
			if r.Keys != 3000 || r.Ops <= 0 {
				t.Errorf("%s: %d keys at %.0f ops/s, want 3000", r.Target, r.Keys, r.Ops)
			}
		}
		if withRedis && !strings.Contains(res.Rows[2].Target, "redis") {
			t.Errorf("third row %q", res.Rows[2].Target)
		}
	}
}
