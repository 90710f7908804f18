package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/streamdedup/dedup/bench"
)

// runIdem binds `dedupbench idem` to bench.IdemConfig: dedup proxy
// against the upstream called directly and the Redis-backed middleware.
func runIdem(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.IdemConfig
	cfg.EnsureDefaults() // the flags' defaults
	fs := newFlagSet("dedupbench idem", stderr)
	c.bind(fs)
	fs.IntVar(&cfg.Requests, "n", cfg.Requests, "requests with new keys per target and round")
	fs.IntVar(&cfg.Replays, "replays", cfg.Replays, "requests repeating stored keys per target and round")
	fs.IntVar(&cfg.Clients, "c", cfg.Clients, "concurrent clients")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds per upstream latency, the targets in turn")
	latencies := durations(cfg.UpstreamLatencies)
	fs.Var(&latencies, "upstream-latency", "the upstream's service times per request, a comma-separated list, each compared in a table of its own (0: no work)")
	fs.IntVar(&cfg.BodySize, "body", cfg.BodySize, "bytes of the upstream's response body")
	fs.IntVar(&cfg.UpstreamWorkers, "upstream-workers", 0, "requests the upstream serves at a time, the others queued (an API bound by its workers or database pool); 0: any number")
	fs.StringVar(&cfg.DedupBin, "dedup", "", "the dedup binary (default: go build it)")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary state directories")
	shared := "2,3"
	fs.StringVar(&shared, "shared-proxies", shared, "also measure N dedup proxies with --store on one dedup serve, for each N of this comma-separated `LIST` (\"\": none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	for _, f := range strings.Split(shared, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("--shared-proxies holds %q: want a positive number of proxies", f)
		}
		cfg.SharedProxies = append(cfg.SharedProxies, n)
	}
	for _, d := range latencies {
		if d < 0 {
			return fmt.Errorf("--upstream-latency must not be negative, got %v", d)
		}
	}
	if cfg.UpstreamWorkers < 0 {
		return fmt.Errorf("--upstream-workers must not be negative, got %d", cfg.UpstreamWorkers)
	}
	if len(latencies) == 0 {
		return fmt.Errorf("--upstream-latency needs at least one duration")
	}
	cfg.UpstreamLatencies = latencies
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable to run targets in processes of their own: %w", err)
	}
	cfg.TargetCmd = []string{exe, idemTargetCommand}
	res, err := bench.Idem(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	if err := c.charts(stderr, func(dir string) ([]string, error) { return bench.PlotIdem(res, dir) }); err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}

// idemTargetCommand is the hidden subcommand idem runs its in-memory
// middleware and its constant replay in, so that each has a process of
// its own as dedup proxy has.
const idemTargetCommand = "idem-target"

// runIdemTarget serves [bench.ServeIdemMemory] (--kind memory) or
// [bench.ServeIdemConstant] (--kind constant) until ctx ends.
func runIdemTarget(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("dedupbench "+idemTargetCommand, stderr)
	kind := fs.String("kind", "", "memory (the middleware on a Go map, needs --upstream) or constant (a replay built on the spot)")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := fs.String("upstream", "", "the upstream's URL")
	body := fs.Int("body", 256, "bytes of the constant replay's body")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch *kind {
	case "memory":
		if *upstream == "" {
			return fmt.Errorf("--kind memory needs --upstream")
		}
		return bench.ServeIdemMemory(ctx, *listen, *upstream, stderr)
	case "constant":
		if *body < 0 {
			return fmt.Errorf("--body must not be negative, got %d", *body)
		}
		return bench.ServeIdemConstant(ctx, *listen, *body, stderr)
	}
	return fmt.Errorf("--kind must be memory or constant, got %q", *kind)
}
