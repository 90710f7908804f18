package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/stream"
)

// filterConfig is what the flags of `dedup filter` say: the stream
// filter's Config, and what the command does around it.
type filterConfig struct {
	stream.Config
	engine   engineFlags
	stats    bool
	metrics  string
	progress string
	// snapshotInterval is the period of filter snapshots with --state.
	snapshotInterval time.Duration
	// explicit holds the names of the flags given on the command line.
	explicit map[string]bool
}

// memCommitEvery is --commit-every without --state: in memory a commit
// costs no fsync, and the keys between two commits wait in the engine's
// in-flight sets, about 90 bytes a key with its bytes, besides the sets
// kept for reuse: smaller commits hold fewer (1M lines of 952k distinct
// keys peak at 115 MiB RSS at 16384 against 150 MiB at 100000, in the
// same time).
const memCommitEvery = 16384

// defaultChunk is --chunk: a batch of 256 KiB, read, scanned and written
// again, stays in the CPU caches between its passes (BenchmarkFilter
// measured larger and smaller batches slower).
const defaultChunk = 256 << 10

func newFilterFlags(e *env) (*flag.FlagSet, *filterConfig) {
	c := &filterConfig{}
	fs := newFlags(e, "dedup filter", filterHelpHead, filterHelpTail)
	fs.Var((*stringList)(&c.Inputs), "in", "input `FILE` (repeatable; positional arguments too; - or none is stdin)")
	fs.StringVar(&c.Out, "out", "-", "write distinct events to `FILE` (- is stdout)")
	fs.StringVar(&c.Dups, "dups", "", "write duplicate events to `FILE`")
	fs.StringVar(&c.Rejects, "rejects", "", "write rejected lines to `FILE` (default stderr)")
	fs.StringVar(&c.State, "state", "", "state `DIR`: remember keys across runs and resume after a crash (default: in memory)")
	fs.StringVar(&c.Keys.Format, "format", "json", "input format: json (NDJSON, one object per line) or lines")
	fs.StringVar(&c.Keys.Key, "key", "", "json: key `PATHS`, comma-separated, each dotted from the top of the object (event_id; user.id,user.seq)")
	fs.IntVar(&c.Keys.Field, "field", 0, "lines: key is field `N` (from 1) of --delim separated fields")
	fs.StringVar(&c.Keys.Delim, "delim", "\t", "lines: field delimiter for --field")
	fs.StringVar(&c.Keys.Regex, "regex", "", "lines: key is the first group (or the match) of `RE`")
	fs.StringVar(&c.Time.Field, "time-field", "", "run the window on each event's time, taken from `PATH` (json: a dotted path; lines: a field number of --delim separated fields): a number of s, ms, us or ns since 1970, or an RFC 3339 string (default: the wall clock)")
	fs.StringVar(&c.Time.Unit, "time-unit", "auto", "unit of numeric --time-field values: s, ms, us, ns, or auto (by magnitude: below 1e11 s, 1e14 ms, 1e17 us, else ns)")
	fs.IntVar(&c.Keys.MaxKey, "max-key", 4096, "reject keys over `N` bytes")
	fs.IntVar(&c.Keys.MaxLine, "max-line", 16<<20, "reject lines over `N` bytes")
	c.engine.register(fs, tuneUsage)
	fs.IntVar(&c.CommitEvery, "commit-every", 100000, "commit after `N` events (without --state: 16384)")
	fs.DurationVar(&c.CommitInterval, "commit-interval", time.Second, "commit at least every `DURATION`")
	fs.BoolVar(&c.Strict, "strict", false, "stop with exit status 2 at the first rejected line")
	fs.BoolVar(&c.stats, "stats", false, "print a summary on stderr at the end")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics (e.g. 127.0.0.1:9090; :9090 listens on every interface)")
	fs.StringVar(&c.progress, "progress", "auto", "progress bar on stderr: auto (when a terminal), always, never")
	fs.BoolVar(&c.FromStart, "from-start", false, "ignore the committed position: read the inputs from their start, appending to the state's outputs (committed keys still count)")
	fs.BoolVar(&c.Overwrite, "overwrite", false, "truncate existing output files that a resumed job does not own (refused otherwise when the state remembers keys)")
	fs.IntVar(&c.Chunk, "chunk", defaultChunk, "read `BYTES` per batch")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", time.Minute, "with --state: snapshot the filters every `DURATION` and at the end, so a restart loads them instead of rebuilding (0: only at the end)")
	return fs, c
}

func runFilter(e *env, args []string) error {
	fs, c := newFilterFlags(e)
	// --in FILEs and positional FILEs are one list, in the order given.
	if err := flagArgsTo(fs, args, func(a string) { c.Inputs = append(c.Inputs, a) }); err != nil {
		return err
	}
	c.explicit = explicitFlags(fs)
	if c.State == "" && !c.explicit["commit-every"] {
		c.CommitEvery = memCommitEvery
	}
	c.Keys.FieldSet = c.explicit["field"]
	if len(c.Inputs) == 0 {
		c.Inputs = []string{"-"}
	}
	c.Stdin, c.Stdout, c.Stderr, c.Interrupt = e.stdin, e.stdout, e.stderr, e.sigs
	switch {
	case c.snapshotInterval < 0:
		return usagef("--snapshot-interval %v: must not be negative", c.snapshotInterval)
	case c.progress != "auto" && c.progress != "always" && c.progress != "never":
		return usagef("--progress %q: want auto, always or never", c.progress)
	}
	if err := c.Validate(); err != nil {
		return usageErr(err)
	}
	if c.metrics != "" {
		if err := checkAddr("--metrics", c.metrics); err != nil {
			return err
		}
	}
	f := &filterRun{env: e, cfg: c}
	return f.run()
}

// filterRun is one run of `dedup filter`: the stream filter over an
// engine, with the command's metrics, progress bar and summary.
type filterRun struct {
	env *env
	cfg *filterConfig
	eng *dedup.Engine
	// filter is the stream filter, once made (the metrics server starts
	// before it and reads it).
	filter                   atomic.Pointer[stream.Filter]
	metricsLn                net.Listener         // --metrics, listening before anything is written
	commitHist, snapshotHist prometheus.Histogram // with --metrics
}

func (f *filterRun) run() (err error) {
	c := f.cfg
	opts := c.engine.options(c.State)
	opts.EventTime = c.Time.Field != ""
	opts.MaxInFlight = stream.MaxInFlight(&c.Config)
	opts.MaxKeySize = c.Keys.MaxKey
	if err := c.engine.checkAuto(c.explicit); err != nil {
		return err
	}
	if err := checkOptions(opts, c.explicit); err != nil {
		return err
	}
	if c.State != "" {
		// An existing state keeps its shape: adopt what the flags leave
		// unsaid, refuse what they contradict.
		if err := adoptState(c.State, c.explicit, &opts); err != nil {
			return err
		}
		opts.SnapshotInterval = c.snapshotInterval // Close writes a last one too
		if c.snapshotInterval == 0 {
			opts.SnapshotInterval = -1 // the engine's periodic and Close snapshots off: only the one finish writes
		}
		opts.Logf = engineLog(f.env)
	}
	if opts.AutoWindow != nil && opts.Logf == nil {
		opts.Logf = engineLog(f.env) // every window change is logged
	}
	// What can fail is tried before any output is created or truncated:
	// the metrics port, the state, the inputs.
	if err := f.openMetricsPort(); err != nil {
		return err
	}
	c.Window = cmp.Or(opts.Window, engineDefaults.Window)
	start := time.Now()
	if f.eng, err = dedup.Open(opts); err != nil {
		if f.metricsLn != nil {
			_ = f.metricsLn.Close()
		}
		// The engine's error names the state already ("open state DIR").
		return openErr(c.State, err)
	}
	stopMetrics := func() error { return nil }
	defer func() { err = f.finish(err, stopMetrics, opts.SnapshotInterval) }()
	if stopMetrics, err = f.serveMetrics(); err != nil {
		stopMetrics = func() error { return nil }
		return err
	}
	c.OnCommit = func(d time.Duration) {
		if f.commitHist != nil {
			f.commitHist.Observe(d.Seconds())
		}
	}
	sf, err := stream.New(f.eng, c.Config)
	if err != nil {
		return markUsage(err)
	}
	f.filter.Store(sf)
	// Everything is open: what start-up read of the binary need not stay
	// resident while the lines are read.
	releaseStartupPages()
	stopProgress := f.startProgress()
	err = sf.Run()
	stopProgress()
	if c.stats {
		f.printStats(start)
	}
	return markUsage(err)
}

// markUsage gives the stream filter's usage errors and rejected lines
// exit status 2.
func markUsage(err error) error {
	if errors.Is(err, stream.ErrUsage) || errors.Is(err, stream.ErrRejected) {
		return &exitError{code: exitBad, err: err}
	}
	return err
}

// finish ends a run that opened the engine: it closes the stream filter
// (the commit in flight, the outputs and inputs), stops the metrics,
// writes the last snapshot and closes the engine. A snapshot that cannot
// be written after the commits succeeded (a full disk, say) is a warning:
// the state is committed, and the next start restores without it. A run
// whose lines were mostly rejected fails here, after all that
// (Filter.Verdict).
func (f *filterRun) finish(err error, stopMetrics func() error, snapshotInterval time.Duration) error {
	sf := f.filter.Load()
	if sf != nil {
		if cerr := sf.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if cerr := stopMetrics(); cerr != nil && err == nil {
		err = cerr
	}
	var snapErr error
	// With periodic snapshots Close writes a last one. Without, write it
	// here, after a run that ended well (or was interrupted, its state
	// committed), so that the next start loads it.
	if f.cfg.State != "" && snapshotInterval < 0 && (err == nil || errors.Is(err, stream.ErrInterrupted)) {
		snapErr = f.eng.Snapshot()
	}
	cerr := f.eng.Close()
	serr, cerr := splitSnapshotErr(cerr)
	snapErr = errors.Join(snapErr, serr)
	if cerr != nil && err == nil {
		err = fmt.Errorf("close state: %w", cerr)
	}
	if snapErr != nil {
		fmt.Fprintf(f.env.stderr, "dedup: warning: the last snapshot of the filters could not be written (%v): the state is committed; the next start restores from an older snapshot and the commit log, or rebuilds the filters, which takes longer\n",
			strings.TrimPrefix(snapErr.Error(), "dedup: "))
	}
	if err == nil && sf != nil {
		err = markUsage(sf.Verdict())
	}
	return err
}

// splitSnapshotErr splits an error of Engine.Close into its failed
// snapshot (dedup.ErrSnapshot) and the rest.
func splitSnapshotErr(err error) (snap, rest error) {
	if err == nil {
		return nil, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var s, r []error
	for _, e := range errs {
		if errors.Is(e, dedup.ErrSnapshot) {
			s = append(s, e)
		} else {
			r = append(r, e)
		}
	}
	return errors.Join(s...), errors.Join(r...)
}
