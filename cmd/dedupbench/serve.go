package main

import (
	"context"
	"fmt"
	"io"

	"github.com/streamdedup/dedup/bench"
)

// runServe binds `dedupbench serve` to bench.ServeConfig: redis-benchmark
// against redis-server and dedup's RESP server, side by side.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.ServeConfig
	cfg.EnsureDefaults() // the flags' defaults
	cfg.Modes = nil      // --modes: its own list
	fs := newFlagSet("dedupbench serve", stderr)
	c.bind(fs)
	fs.IntVar(&cfg.Requests, "n", cfg.Requests, "SET NX requests (redis-benchmark -n)")
	fs.IntVar(&cfg.Clients, "c", cfg.Clients, "connections (redis-benchmark -c)")
	fs.IntVar(&cfg.Pipeline, "P", cfg.Pipeline, "pipeline depth (redis-benchmark -P)")
	fs.IntVar(&cfg.KeySpace, "r", cfg.KeySpace, "key space (redis-benchmark -r)")
	var spaces counts
	fs.Var(&spaces, "sizes", "instead of -r and -n: a run per key space K in this list (-r K -n 3K), e.g. 100000,200000,1000000,10000000")
	fs.IntVar(&cfg.TTL, "ttl", cfg.TTL, "EX of every SET, seconds; dedup's window")
	fs.Var((*words)(&cfg.Modes), "modes", "dedup modes: exact,probabilistic")
	fs.StringVar(&cfg.Fsync, "fsync", cfg.Fsync, "dedup durability: always, everysec or no")
	fs.Float64Var(&cfg.FalsePositiveRate, "fp", cfg.FalsePositiveRate, "dedup false-positive target")
	fs.IntVar(&cfg.MaddItems, "madd-items", cfg.MaddItems, "items per BF.MADD call")
	fs.IntVar(&cfg.MaddRequests, "madd-n", cfg.MaddRequests, "BF.MADD calls (negative: skip)")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "repeat the runs; report the median round of each target")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary state directories")
	fs.IntVar(&cfg.ClusterNodes, "cluster-nodes", 0, "instead: 1 dedup node against `N` (at least 2) and against an N-node Redis Cluster, each node a child process, through a go-redis ClusterClient")
	fs.StringVar(&cfg.DedupBin, "dedup-bin", "", "with --cluster-nodes, the dedup binary to run (default: go build it)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.KeySpaces = spaces
	if cfg.ClusterNodes != 0 {
		if cfg.ClusterNodes < 2 {
			return fmt.Errorf("--cluster-nodes %d: want at least 2 (0 runs the single-server comparison)", cfg.ClusterNodes)
		}
		res, err := bench.ServeCluster(ctx, cfg, newProgress(c, stderr))
		if err != nil {
			return err
		}
		return output(c, stdout, res, func() error { return res.WriteText(stdout) })
	}
	res, err := bench.Serve(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	if err := c.charts(stderr, func(dir string) ([]string, error) { return bench.PlotServe(res, dir) }); err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}
