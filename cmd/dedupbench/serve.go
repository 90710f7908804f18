package main

import (
	"context"
	"io"

	"github.com/streamdedup/dedup/bench"
)

// runServe binds `dedupbench serve` to bench.ServeConfig: redis-benchmark
// against redis-server and dedup's RESP server, side by side.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.ServeConfig
	fs := newFlagSet("dedupbench serve", stderr)
	c.bind(fs)
	fs.IntVar(&cfg.Requests, "n", 2_000_000, "SET NX requests (redis-benchmark -n)")
	fs.IntVar(&cfg.Clients, "c", 8, "connections (redis-benchmark -c)")
	fs.IntVar(&cfg.Pipeline, "P", 16, "pipeline depth (redis-benchmark -P)")
	fs.IntVar(&cfg.KeySpace, "r", 10_000_000, "key space (redis-benchmark -r)")
	fs.IntVar(&cfg.TTL, "ttl", 3600, "EX of every SET, seconds; dedup's window")
	fs.Var((*words)(&cfg.Modes), "modes", "dedup modes: exact,probabilistic")
	fs.StringVar(&cfg.Fsync, "fsync", "everysec", "dedup durability: always, everysec or no")
	fs.Float64Var(&cfg.FalsePositiveRate, "fp", 0.01, "dedup false-positive target")
	fs.IntVar(&cfg.MaddItems, "madd-items", 100, "items per BF.MADD call")
	fs.IntVar(&cfg.MaddRequests, "madd-n", 100_000, "BF.MADD calls (negative: skip)")
	fs.IntVar(&cfg.Rounds, "rounds", 1, "repeat the runs; report the median round of each target")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary state directories")
	if err := parse(fs, args); err != nil {
		return err
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
