package main

import (
	"context"
	"io"

	"github.com/streamdedup/dedup/bench"
)

// runIdem binds `dedupbench idem` to bench.IdemConfig: dedup proxy
// against the upstream called directly and the Redis-backed middleware.
func runIdem(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.IdemConfig
	fs := newFlagSet("dedupbench idem", stderr)
	c.bind(fs)
	fs.IntVar(&cfg.Requests, "n", 20_000, "requests with new keys per target")
	fs.IntVar(&cfg.Replays, "replays", 100_000, "requests repeating stored keys per target")
	fs.IntVar(&cfg.Clients, "c", 64, "concurrent clients")
	fs.DurationVar(&cfg.UpstreamLatency, "upstream-latency", 20e6, "time the upstream takes per request")
	fs.IntVar(&cfg.BodySize, "body", 256, "bytes of the upstream's response body")
	fs.StringVar(&cfg.DedupBin, "dedup", "", "the dedup binary (default: go build it)")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary state directories")
	if err := parse(fs, args); err != nil {
		return err
	}
	res, err := bench.Idem(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}
