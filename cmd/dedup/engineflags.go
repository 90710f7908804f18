package main

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
)

// engineDefaults are the engine's option defaults: the engine flags show
// them, so the command never drifts from the library.
var engineDefaults = *(&dedup.Options{}).WithDefaults()

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
	horizon       int
	horizonBytes  byteSize
	autoWin       autoWindowFlags
	refresh       bool
}

// engineUsage is the help text of each engine flag; a `NAME` between
// backquotes names the flag's value in the help, as flag.PrintDefaults
// reads it. check says the flags that shape a state only check it: they
// default to zero, "adopt the state's", and the help shows no default.
type engineUsage struct {
	window, rate, fp, filter, probabilistic, generations, shards string
	check                                                        bool
}

// tuneUsage words the engine flags for a command that runs an engine
// (filter): they set its options.
var tuneUsage = engineUsage{
	window:        "remember keys for `DURATION`",
	rate:          "expected distinct keys per second, `N` (filter sizing)",
	fp:            "pre-filter false-positive `RATE`",
	filter:        "pre-filter: blocked, bloom, cuckoo, interleaved, wide (blocked's memory, one page per key) or fuse (older generations static: less memory)",
	probabilistic: "no exact store: a filter hit is a duplicate (drops about --fp of new events, faster)",
	generations:   "`N` generations the window is cut into",
	shards:        "`N` engine shards",
}

// checkUsage words the engine flags for a command that opens an existing
// state to read it (stats): the persisted options are adopted, and a flag
// given is a check against them.
var checkUsage = engineUsage{
	check:         true,
	window:        "check: fail unless the state was created with this `DURATION` (default: adopt the state's)",
	rate:          "expected distinct keys per second, `N` (sizes a new generation; default: the state's)",
	fp:            "pre-filter false-positive `RATE` (sizes a new generation; default: the state's)",
	filter:        "check: fail unless the state uses this filter (default: adopt)",
	probabilistic: "check: fail unless the state's mode is this (default: adopt)",
	generations:   "check: fail unless the state has `N` generations (default: adopt)",
	shards:        "check: fail unless the state has `N` shards (default: adopt)",
}

// register defines --window, --rate, --fp, --filter, --probabilistic,
// --generations and --shards on fs, with the engine's defaults (none for
// the check flags of u) and the help texts of u.
func (f *engineFlags) register(fs *flag.FlagSet, u engineUsage) {
	d := engineDefaults
	if u.check {
		d.Window, d.Filter, d.Generations, d.Shards = 0, "", 0, 0
	}
	if u.check {
		fs.DurationVar(&f.window, "window", d.Window, u.window)
	} else {
		f.registerWindow(fs, d, u.window)
	}
	fs.Float64Var(&f.rate, "rate", d.ExpectedRate, u.rate)
	fs.Float64Var(&f.fp, "fp", d.FalsePositiveRate, u.fp)
	fs.StringVar(&f.filter, "filter", d.Filter, u.filter)
	fs.BoolVar(&f.probabilistic, "probabilistic", false, u.probabilistic)
	fs.IntVar(&f.generations, "generations", d.Generations, u.generations)
	fs.IntVar(&f.shards, "shards", d.Shards, u.shards)
	if !u.check {
		fs.BoolVar(&f.refresh, "refresh", false, "sliding window: a duplicate renews its key, remembered --window after its last sighting instead of its first (see docs/window.md)")
		fs.IntVar(&f.horizon, "horizon-sample", d.HorizonSample, "window advisor: keep at most 1 key in `N` (a power of two) for 8 windows past the window, 4 bytes each, to count the duplicates it lets through, halving the sample to stay within --horizon-bytes; -1 keeps none (see docs/window.md)")
		f.horizonBytes = byteSize(d.HorizonBytes)
		fs.Var(&f.horizonBytes, "horizon-bytes", "window advisor: the memory its horizon's sample may take, `SIZE` (bytes, or with KiB, MiB, GiB)")
	}
}

// optionFlags names the flag that sets each engine option a command
// takes from its flags.
var optionFlags = map[string]string{
	"Window":               "--window",
	"ExpectedRate":         "--rate",
	"FalsePositiveRate":    "--fp",
	"Filter":               "--filter",
	"Generations":          "--generations",
	"Shards":               "--shards",
	"MaxKeySize":           "--max-key",
	"HorizonSample":        "--horizon-sample",
	"HorizonBytes":         "--horizon-bytes",
	"AutoWindow.MaxLeaks":  "--max-leaks",
	"AutoWindow.Min":       "--window-min",
	"AutoWindow.Max":       "--window-max",
	"AutoWindow.MaxMemory": "--max-memory",
}

// optionWord matches the name of an option in a reason Options.Validate
// gives ("with Filter fuse at FalsePositiveRate 1e-09", "needs a Dir").
var optionWord = regexp.MustCompile(`\b(a Dir|Dir|Window|ExpectedRate|FalsePositiveRate|Filter|Generations|Shards|MaxKeySize|HorizonSample|HorizonBytes)\b`)

// flagWords rewrites the option names in why into the flags that set
// them: a user of the command never sees Options.
func flagWords(why string) string {
	return optionWord.ReplaceAllStringFunc(why, func(w string) string {
		if w == "a Dir" || w == "Dir" {
			return "--state DIR"
		}
		return optionFlags[w]
	})
}

// checkOptions validates the options o that flags set, before the engine
// fills its defaults in: a flag given a zero or out-of-range value is bad
// usage naming it, never replaced by the default. Options whose flag was
// not given (explicit, by flag name) are checked as the engine's
// defaults, which they become.
func checkOptions(o dedup.Options, explicit map[string]bool) error {
	d := engineDefaults
	var msgs []string
	for _, p := range []struct {
		flag string
		zero bool
		def  func()
	}{
		{"window", o.Window == 0, func() { o.Window = d.Window }},
		{"rate", o.ExpectedRate == 0, func() { o.ExpectedRate = d.ExpectedRate }},
		{"fp", o.FalsePositiveRate == 0, func() { o.FalsePositiveRate = d.FalsePositiveRate }},
		{"filter", o.Filter == "", func() { o.Filter = d.Filter }},
		{"generations", o.Generations == 0, func() { o.Generations = d.Generations }},
		{"shards", o.Shards == 0, func() { o.Shards = d.Shards }},
		{"max-key", o.MaxKeySize == 0, func() { o.MaxKeySize = d.MaxKeySize }},
		{"horizon-sample", o.HorizonSample == 0, func() { o.HorizonSample = d.HorizonSample }},
	} {
		switch {
		case !p.zero:
		case explicit[p.flag]:
			// Validate would fill the default in for a zero: say it here.
			msgs = append(msgs, "--"+p.flag+": must not be zero or empty (leave the flag out for the default)")
		default:
			p.def()
		}
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = d.MaxInFlight
	}
	err := o.Validate()
	if err == nil && len(msgs) == 0 {
		return nil
	}
	// Validate joins one error per option, worded "PREFIX: Name why".
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	for _, e := range errs {
		msg := strings.TrimPrefix(e.Error(), dedup.ErrInvalidOptions.Error()+": ")
		name, why, _ := strings.Cut(msg, " ")
		if fl, ok := optionFlags[name]; ok {
			msg = fl + ": " + flagWords(why)
		}
		msgs = append(msgs, msg)
	}
	return usageErr(fmt.Errorf("%s", strings.Join(msgs, "; ")))
}

// options returns the engine options the flags say, for the state
// directory dir ("" keeps the keys in memory). The command adds the
// options it sets itself, and adopts an existing state's shape
// (adoptState) before dedup.Open.
func (f *engineFlags) options(dir string) dedup.Options {
	o := dedup.Options{
		Dir:               dir,
		Window:            f.window,
		ExpectedRate:      f.rate,
		FalsePositiveRate: f.fp,
		Filter:            f.filter,
		Probabilistic:     f.probabilistic,
		Generations:       f.generations,
		Shards:            f.shards,
		HorizonSample:     f.horizon,
		HorizonBytes:      int64(f.horizonBytes),
		Refresh:           f.refresh,
	}
	f.autoOptions(&o)
	return o
}
