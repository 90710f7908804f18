package main

import (
	"context"
	"io"

	"github.com/streamdedup/dedup/bench"
)

// runFilter binds `dedupbench filter` to bench.FilterCmdConfig: dedup filter
// with its keys in memory against awk's !seen[key]++ on one NDJSON file,
// peak RSS of each process.
func runFilter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.FilterCmdConfig
	fs := newFlagSet("dedupbench filter", stderr)
	c.bind(fs)
	fs.IntVar(&cfg.Lines, "lines", 1_000_000, "NDJSON lines in the input")
	fs.Uint64Var(&cfg.Stream.Seed, "seed", 1, "stream seed")
	fs.Float64Var(&cfg.Stream.DuplicateFraction, "dup", 0.05, "share of lines that are duplicates")
	fs.StringVar(&cfg.Dedup, "dedup", "dedup", "the dedup binary (go install ./cmd/dedup)")
	fs.StringVar(&cfg.Awk, "awk", "awk", "the awk binary")
	fs.StringVar(&cfg.Dir, "dir", "", "parent of the temporary input and output")
	if err := parse(fs, args); err != nil {
		return err
	}
	res, err := bench.FilterCmd(ctx, cfg)
	if err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}
