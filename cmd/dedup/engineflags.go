package main

import (
	"flag"
	"time"

	"github.com/streamdedup/dedup"
)

// engineDefaults are the engine's option defaults: the engine flags show
// them, so the command never drifts from the library.
var engineDefaults = *(&dedup.Options{}).EnsureDefaults()

// engineFlags are the flags that set the engine's options, shared by every
// command that opens an engine. A command keeps one in its config,
// defines the flags with register and builds the options with options:
//
//	c.engine.register(fs, tuneUsage)
//	...
//	opts := c.engine.options(c.state)
//	err := adoptState(c.state, explicitFlags(fs), &opts) // an existing state keeps its shape
type engineFlags struct {
	window        time.Duration
	rate          float64
	fp            float64
	filter        string
	probabilistic bool
	generations   int
	shards        int
}

// engineUsage is the help text of each engine flag; a `NAME` between
// backquotes names the flag's value in the help, as flag.PrintDefaults
// reads it.
type engineUsage struct {
	window, rate, fp, filter, probabilistic, generations, shards string
}

// tuneUsage words the engine flags for a command that runs an engine
// (filter): they set its options.
var tuneUsage = engineUsage{
	window:        "remember keys for `DURATION`",
	rate:          "expected distinct keys per `SECOND` (filter sizing)",
	fp:            "pre-filter false-positive `RATE`",
	filter:        "pre-filter: blocked, bloom or cuckoo",
	probabilistic: "no exact store: a filter hit is a duplicate (drops about --fp of new events, faster)",
	generations:   "generations the window is cut into",
	shards:        "engine shards",
}

// checkUsage words the engine flags for a command that opens an existing
// state to read it (stats): the persisted options are adopted, and a flag
// given is a check against them.
var checkUsage = engineUsage{
	window:        "check: fail unless the state was created with this window (default: adopt the state's)",
	rate:          "expected distinct keys per `SECOND` (sizes a new generation; not persisted)",
	fp:            "pre-filter false-positive `RATE` (sizes a new generation; not persisted)",
	filter:        "check: fail unless the state uses this filter (default: adopt)",
	probabilistic: "check: fail unless the state's mode is this (default: adopt)",
	generations:   "check: fail unless the state has this many generations (default: adopt)",
	shards:        "check: fail unless the state has this many shards (default: adopt)",
}

// register defines --window, --rate, --fp, --filter, --probabilistic,
// --generations and --shards on fs, with the engine's defaults and the
// help texts of u.
func (f *engineFlags) register(fs *flag.FlagSet, u engineUsage) {
	fs.DurationVar(&f.window, "window", engineDefaults.Window, u.window)
	fs.Float64Var(&f.rate, "rate", engineDefaults.ExpectedRate, u.rate)
	fs.Float64Var(&f.fp, "fp", engineDefaults.FalsePositiveRate, u.fp)
	fs.StringVar(&f.filter, "filter", engineDefaults.Filter, u.filter)
	fs.BoolVar(&f.probabilistic, "probabilistic", false, u.probabilistic)
	fs.IntVar(&f.generations, "generations", engineDefaults.Generations, u.generations)
	fs.IntVar(&f.shards, "shards", engineDefaults.Shards, u.shards)
}

// options returns the engine options the flags say, for the state
// directory dir ("" keeps the keys in memory). The command adds the
// options it sets itself, and adopts an existing state's shape
// (adoptState) before dedup.Open.
func (f *engineFlags) options(dir string) dedup.Options {
	return dedup.Options{
		Dir:               dir,
		Window:            f.window,
		ExpectedRate:      f.rate,
		FalsePositiveRate: f.fp,
		Filter:            f.filter,
		Probabilistic:     f.probabilistic,
		Generations:       f.generations,
		Shards:            f.shards,
	}
}
