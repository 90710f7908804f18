package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/streamdedup/dedup"
)

// statsConfig is what the flags of `dedup stats` say.
type statsConfig struct {
	window        time.Duration
	rate          float64
	fp            float64
	filter        string
	probabilistic bool
	generations   int
	shards        int
	json          bool
}

func newStatsFlags(e *env) (*flag.FlagSet, *statsConfig) {
	c := &statsConfig{}
	fs := flag.NewFlagSet("dedup stats", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.DurationVar(&c.window, "window", time.Hour, "the --window the directory was created with")
	fs.Float64Var(&c.rate, "rate", 10000, "the --rate the directory was created with")
	fs.Float64Var(&c.fp, "fp", 0.01, "the --fp the directory was created with")
	fs.StringVar(&c.filter, "filter", "blocked", "the --filter the directory was created with")
	fs.BoolVar(&c.probabilistic, "probabilistic", false, "the directory was created with --probabilistic")
	fs.IntVar(&c.generations, "generations", 8, "the --generations the directory was created with")
	fs.IntVar(&c.shards, "shards", 16, "the --shards the directory was created with")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.Usage = func() { fmt.Fprint(fs.Output(), statsHelpHead); fs.PrintDefaults() }
	return fs, c
}

// statsReport is what `dedup stats` prints.
type statsReport struct {
	Dir        string      `json:"dir"`
	Checkpoint *checkpoint `json:"checkpoint,omitempty"`
	// ForeignCheckpoint is set when another client committed the
	// checkpoint: its size in bytes.
	ForeignCheckpoint int         `json:"foreign_checkpoint,omitempty"`
	Engine            dedup.Stats `json:"engine"`
}

func runStats(e *env, args []string) error {
	fs, c := newStatsFlags(e)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr(err)
	}
	if len(pos) != 1 {
		return usagef("stats: want one state directory, got %d arguments", len(pos))
	}
	dir := pos[0]
	// Open would create a missing directory: refuse instead.
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if len(ents) == 0 {
		return fmt.Errorf("stats: %s is empty, not a state directory", dir)
	}
	eng, err := dedup.Open(dedup.Options{
		Dir:               dir,
		Window:            c.window,
		ExpectedRate:      c.rate,
		FalsePositiveRate: c.fp,
		Filter:            c.filter,
		Probabilistic:     c.probabilistic,
		Generations:       c.generations,
		Shards:            c.shards,
	})
	if err != nil {
		if errors.Is(err, dedup.ErrIncompatible) || errors.Is(err, dedup.ErrInvalidOptions) {
			return usagef("stats: %w (pass the options the directory was created with)", err)
		}
		return fmt.Errorf("stats: %w", err)
	}
	rep := statsReport{Dir: dir, Engine: eng.Stats()}
	if raw := eng.Checkpoint(); raw != nil {
		if cp, err := decodeCheckpoint(raw); err == nil {
			rep.Checkpoint = &cp
		} else {
			rep.ForeignCheckpoint = len(raw)
		}
	}
	if err := eng.Close(); err != nil {
		return fmt.Errorf("stats: close: %w", err)
	}
	if c.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printStatsReport(e, &rep)
	return nil
}

func printStatsReport(e *env, r *statsReport) {
	w := e.stdout
	st := &r.Engine
	fmt.Fprintf(w, "state directory  %s\n", r.Dir)
	fmt.Fprintf(w, "disk             %s\n", humanBytes(st.DiskBytes))
	fmt.Fprintf(w, "keys             %d in the filters (%d restored in %v)\n", st.FilterKeys, st.RestoredKeys, st.RestoreDuration.Round(time.Millisecond))
	fmt.Fprintf(w, "filter memory    %s, estimated FP rate %.4g\n", humanBytes(st.FilterBytes), st.EstimatedFPRate)
	fmt.Fprintf(w, "generations      %d live\n", len(st.GenerationStats))
	for _, g := range st.GenerationStats {
		fmt.Fprintf(w, "  gen %-8d %s .. %s  %10d keys  %10s  fp %.4g\n", g.ID,
			g.Start.Format(time.RFC3339), g.End.Format(time.RFC3339), g.Keys, humanBytes(g.Bytes), g.FPRate)
	}
	switch {
	case r.Checkpoint != nil:
		cp := r.Checkpoint
		fmt.Fprintf(w, "last job         %v -> %s\n", cp.Inputs, cp.Out)
		if cp.File >= len(cp.Inputs) {
			fmt.Fprintf(w, "position         complete\n")
		} else {
			fmt.Fprintf(w, "position         input %d (%s) byte %d, line %d\n", cp.File, cp.Inputs[cp.File], cp.Offset, cp.Line)
		}
		fmt.Fprintf(w, "output lengths   out %d, dups %d, rejects %d bytes\n", cp.OutLen, cp.DupsLen, cp.RejectsLen)
		n := cp.Counts
		fmt.Fprintf(w, "committed counts %d events: %d distinct, %d duplicates, %d rejects, %s read\n",
			n.Events, n.Distinct, n.Duplicates, n.Rejects, humanBytes(uint64(n.Bytes)))
	case r.ForeignCheckpoint > 0:
		fmt.Fprintf(w, "checkpoint       %d bytes, not written by dedup filter\n", r.ForeignCheckpoint)
	default:
		fmt.Fprintf(w, "checkpoint       none\n")
	}
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
