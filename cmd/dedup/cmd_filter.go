package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamdedup/dedup"
)

// filterConfig is what the flags of `dedup filter` say.
type filterConfig struct {
	inputs         stringList
	out            string
	dups           string
	rejects        string
	state          string
	engine         engineFlags
	commitEvery    int
	commitInterval time.Duration
	strict         bool
	stats          bool
	metrics        string
	progress       string
	fromStart      bool
	overwrite      bool
	chunk          int
	keys           extractorConfig
	times          timeConfig
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
	fs.Var(&c.inputs, "in", "input `FILE` (repeatable; positional arguments too; - or none is stdin)")
	fs.StringVar(&c.out, "out", "-", "write distinct events to `FILE` (- is stdout)")
	fs.StringVar(&c.dups, "dups", "", "write duplicate events to `FILE`")
	fs.StringVar(&c.rejects, "rejects", "", "write rejected lines to `FILE` (default stderr)")
	fs.StringVar(&c.state, "state", "", "state `DIR`: remember keys across runs and resume after a crash (default: in memory)")
	fs.StringVar(&c.keys.format, "format", "json", "input format: json (NDJSON, one object per line) or lines")
	fs.StringVar(&c.keys.key, "key", "", "json: key `PATHS`, comma-separated, each dotted from the top of the object (event_id; user.id,user.seq)")
	fs.IntVar(&c.keys.field, "field", 0, "lines: key is field `N` (from 1) of --delim separated fields")
	fs.StringVar(&c.keys.delim, "delim", "\t", "lines: field delimiter for --field")
	fs.StringVar(&c.keys.regex, "regex", "", "lines: key is the first group (or the match) of `RE`")
	fs.StringVar(&c.times.field, "time-field", "", "run the window on each event's time, taken from `PATH` (json: a dotted path; lines: a field number of --delim separated fields): a number of s, ms, us or ns since 1970, or an RFC 3339 string (default: the wall clock)")
	fs.StringVar(&c.times.unit, "time-unit", "auto", "unit of numeric --time-field values: s, ms, us, ns, or auto (by magnitude: below 1e11 s, 1e14 ms, 1e17 us, else ns)")
	fs.IntVar(&c.keys.maxKey, "max-key", 4096, "reject keys over `N` bytes")
	fs.IntVar(&c.keys.maxLine, "max-line", 16<<20, "reject lines over `N` bytes")
	c.engine.register(fs, tuneUsage)
	fs.IntVar(&c.commitEvery, "commit-every", 100000, "commit after `N` events (without --state: 16384)")
	fs.DurationVar(&c.commitInterval, "commit-interval", time.Second, "commit at least every `DURATION`")
	fs.BoolVar(&c.strict, "strict", false, "stop with exit status 2 at the first rejected line")
	fs.BoolVar(&c.stats, "stats", false, "print a summary on stderr at the end")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics (e.g. 127.0.0.1:9090; :9090 listens on every interface)")
	fs.StringVar(&c.progress, "progress", "auto", "progress bar on stderr: auto (when a terminal), always, never")
	fs.BoolVar(&c.fromStart, "from-start", false, "ignore the committed position: read the inputs from their start, appending to the state's outputs (committed keys still count)")
	fs.BoolVar(&c.overwrite, "overwrite", false, "truncate existing output files that a resumed job does not own (refused otherwise when the state remembers keys)")
	fs.IntVar(&c.chunk, "chunk", defaultChunk, "read `BYTES` per batch")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", time.Minute, "with --state: snapshot the filters every `DURATION` and at the end, so a restart loads them instead of rebuilding (0: only at the end)")
	return fs, c
}

func runFilter(e *env, args []string) error {
	fs, c := newFilterFlags(e)
	// --in FILEs and positional FILEs are one list, in the order given.
	if err := flagArgsTo(fs, args, func(a string) { c.inputs = append(c.inputs, a) }); err != nil {
		return err
	}
	c.explicit = explicitFlags(fs)
	if c.state == "" && !c.explicit["commit-every"] {
		c.commitEvery = memCommitEvery
	}
	c.keys.fieldSet = c.explicit["field"]
	if len(c.inputs) == 0 {
		c.inputs = stringList{"-"}
	}
	if err := c.validate(); err != nil {
		return usageErr(err)
	}
	if err := c.checkSameFiles(e.stdin, e.stdout); err != nil {
		return usageErr(err)
	}
	if c.metrics != "" {
		if err := checkAddr("--metrics", c.metrics); err != nil {
			return err
		}
	}
	x, err := newExtractor(c.keys)
	if err != nil {
		return usageErr(err)
	}
	if err := x.setTime(c.times, c.keys.delim); err != nil {
		return usageErr(err)
	}
	f := &filterRun{env: e, cfg: c, x: x, start: time.Now(), rejectWhy: map[rejectKey]int64{}}
	return f.run()
}

func (c *filterConfig) validate() error {
	switch {
	case c.commitEvery < 1:
		return fmt.Errorf("--commit-every %d: must be at least 1", c.commitEvery)
	case c.commitInterval <= 0:
		return fmt.Errorf("--commit-interval %v: must be positive", c.commitInterval)
	case c.keys.maxLine < 1 || c.keys.maxLine > 1<<29:
		return fmt.Errorf("--max-line %d: must be in [1, %d]", c.keys.maxLine, 1<<29)
	case c.keys.maxKey < 1:
		return fmt.Errorf("--max-key %d: must be at least 1", c.keys.maxKey)
	case c.snapshotInterval < 0:
		return fmt.Errorf("--snapshot-interval %v: must not be negative", c.snapshotInterval)
	case c.chunk < 4096 || c.chunk > 1<<28:
		return fmt.Errorf("--chunk %d: must be in [4096, %d]", c.chunk, 1<<28)
	case c.progress != "auto" && c.progress != "always" && c.progress != "never":
		return fmt.Errorf("--progress %q: want auto, always or never", c.progress)
	}
	stdin := 0
	for _, in := range c.inputs {
		if in == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return errors.New("stdin (-) given more than once")
	}
	outs := map[string]string{}
	for _, o := range [][2]string{{"--out", c.out}, {"--dups", c.dups}, {"--rejects", c.rejects}} {
		if o[1] == "" || o[1] == "-" {
			continue
		}
		abs, err := filepath.Abs(o[1])
		if err != nil {
			return fmt.Errorf("%s %s: %w", o[0], o[1], err)
		}
		if prev, ok := outs[abs]; ok {
			return fmt.Errorf("%s and %s name the same file %s", prev, o[0], o[1])
		}
		outs[abs] = o[0]
	}
	return nil
}

// checkSameFiles refuses an output that is an input or another output by
// the file's identity, whatever the names (a hard link, a symbolic link,
// stdin redirected from it, stdout appended to it): writing it would
// truncate, or feed, what is still to be read.
func (c *filterConfig) checkSameFiles(stdin io.Reader, stdout io.Writer) error {
	type file struct {
		what string
		fi   os.FileInfo
	}
	stat := func(v any) os.FileInfo {
		if f, ok := v.(interface{ Stat() (os.FileInfo, error) }); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				return fi
			}
		}
		return nil
	}
	var ins []file
	for _, in := range c.inputs {
		if in == "-" {
			if fi := stat(stdin); fi != nil {
				ins = append(ins, file{"stdin", fi})
			}
		} else if fi, err := os.Stat(in); err == nil {
			ins = append(ins, file{"input " + in, fi})
		}
	}
	var outs []file
	for _, o := range [][2]string{{"--out", c.out}, {"--dups", c.dups}, {"--rejects", c.rejects}} {
		var fi os.FileInfo
		switch o[1] {
		case "":
			continue
		case "-":
			fi = stat(stdout)
		default:
			fi, _ = os.Stat(o[1]) // none yet: a new file
		}
		if fi == nil {
			continue
		}
		what := o[0] + " " + o[1]
		if o[1] == "-" {
			what = o[0] + " (stdout)"
		}
		for _, f := range append(ins, outs...) {
			if os.SameFile(fi, f.fi) {
				return fmt.Errorf("%s is the same file as %s", what, f.what)
			}
		}
		if o[1] != "-" { // stdout for two outputs interleaves them, as asked
			outs = append(outs, file{what, fi})
		}
	}
	return nil
}

// filterRun is one run of `dedup filter`.
type filterRun struct {
	env   *env
	cfg   *filterConfig
	x     *extractor
	eng   *dedup.Engine
	start time.Time

	job       checkpoint // identity and position, updated as we go
	resumed   bool
	resumedAt string // where, for --stats
	// relocatable: the state's last job wrote these outputs, at a position
	// in a file identified (see locate).
	relocatable bool

	out, dups, rejects *output
	rejectsW           io.Writer // where reject records go
	// rejectsShown counts the reject records written to stderr (no
	// --rejects), rejectsHidden those left out past stderrRejects.
	rejectsShown, rejectsHidden int64
	closers                     []func() error

	run0 counts // job counters at the start of this run
	// The engine goroutine's commit counters (see loop).
	sinceCmt int // events since the last commit barrier
	lastCmt  time.Time

	durable   bool       // a state directory: fsync outputs before commits
	cmtDone   chan error // the commit running in the background, nil if none
	totalSize int64      // input bytes to read in this run, -1 if unknown

	prev    *checkpoint // the state's last checkpoint, nil if none
	inFiles []*os.File  // the inputs that are regular files, by index (identity)
	held    int         // bytes of a last line left unread at the end (source.holdTail)
	// rejectWhy counts this run's rejects by reason, for the verdict on a
	// run that rejected most of its lines (rejectVerdict).
	rejectWhy map[rejectKey]int64
	// window is the engine's Window, for --time-field (eventtime.go);
	// cmtAt is the event time (Unix ns) after which keys were last
	// committed, 0 before any.
	window time.Duration
	cmtAt  int64
	// times holds a group's event times for ObserveBatchTimes.
	times                    []time.Time
	metricsLn                net.Listener         // --metrics, listening before anything is written
	commitHist, snapshotHist prometheus.Histogram // with --metrics

	// Published for progress and metrics.
	pub struct {
		events, distinct, dups, rejects, bytes atomic.Int64
	}
}

func (f *filterRun) run() (err error) {
	c := f.cfg
	opts := c.engine.options(c.state)
	opts.EventTime = c.times.field != ""
	opts.MaxInFlight = maxInFlight(c)
	opts.MaxKeySize = c.keys.maxKey
	if err := checkOptions(opts, c.explicit); err != nil {
		return err
	}
	if c.state != "" {
		// An existing state keeps its shape: adopt what the flags leave
		// unsaid, refuse what they contradict.
		if err := adoptState(c.state, c.explicit, &opts); err != nil {
			return err
		}
		opts.SnapshotInterval = c.snapshotInterval // Close writes a last one too
		if c.snapshotInterval == 0 {
			opts.SnapshotInterval = -1 // the engine's periodic and Close snapshots off: only the one finish writes
		}
		opts.Logf = engineLog(f.env)
	}
	// What can fail is tried before any output is created or truncated:
	// the metrics port, the state, the inputs.
	if err := f.openMetricsPort(); err != nil {
		return err
	}
	f.window = cmp.Or(opts.Window, engineDefaults.Window)
	if f.eng, err = dedup.Open(opts); err != nil {
		if f.metricsLn != nil {
			_ = f.metricsLn.Close()
		}
		// The engine's error names the state already ("open state DIR").
		return openErr(c.state, err)
	}
	f.durable = c.state != ""
	defer func() { err = f.finish(err, opts.SnapshotInterval) }()
	stopMetrics, err := f.serveMetrics()
	if err != nil {
		return err
	}
	f.closers = append(f.closers, stopMetrics)
	if err := f.setup(); err != nil {
		return err
	}
	srcs, err := f.openSources()
	if err != nil {
		return err
	}
	if err := f.openOutputs(); err != nil {
		return err
	}
	// Everything is open: what start-up read of the binary need not stay
	// resident while the lines are read.
	releaseStartupPages()
	stopProgress := f.startProgress()
	err = f.loop(srcs)
	stopProgress()
	if c.stats {
		f.printStats()
	}
	if err == nil && f.held > 0 {
		fmt.Fprintf(f.env.stderr, "dedup: note: %s ends in a line without a newline (%d bytes), left for a later run: it is read once it is whole\n",
			f.cfg.inputs[len(f.cfg.inputs)-1], f.held)
	}
	return err
}

// finish ends a run that opened the engine: it waits for the commit in
// flight, closes the outputs and inputs, writes the last snapshot and
// closes the engine. A snapshot that cannot be written after the commits
// succeeded (a full disk, say) is a warning: the state is committed, and
// the next start restores without it. A run whose lines were mostly
// rejected fails here, after all that (rejectVerdict).
func (f *filterRun) finish(err error, snapshotInterval time.Duration) error {
	if werr := f.waitCommit(); werr != nil && err == nil {
		err = werr
	}
	for i := len(f.closers) - 1; i >= 0; i-- {
		if cerr := f.closers[i](); cerr != nil && err == nil {
			err = cerr
		}
	}
	f.noteHiddenRejects()
	var snapErr error
	// With periodic snapshots Close writes a last one. Without, write it
	// here, after a run that ended well (or was interrupted, its state
	// committed), so that the next start loads it.
	if f.durable && snapshotInterval < 0 && (err == nil || errors.Is(err, errInterrupted)) {
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
	if err == nil {
		err = f.rejectVerdict()
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

// setup resolves the job and decides whether this run resumes the
// state's last one: the same inputs and outputs, files all, and no
// --from-start; or the same outputs and inputs that start with the file
// of its position, rotated since (locate).
func (f *filterRun) setup() error {
	c := f.cfg
	abs := func(name string) (string, error) {
		if name == "" || name == "-" {
			return name, nil
		}
		return filepath.Abs(name)
	}
	j := &f.job
	for _, in := range c.inputs {
		a, err := abs(in)
		if err != nil {
			return err
		}
		j.Inputs = append(j.Inputs, a)
	}
	var err error
	if j.Out, err = abs(c.out); err != nil {
		return err
	}
	if j.Dups, err = abs(c.dups); err != nil {
		return err
	}
	if j.Rejects, err = abs(c.rejects); err != nil {
		return err
	}
	j.Line = 1
	if c.state != "" {
		if j.State, err = filepath.Abs(c.state); err != nil {
			return err
		}
	}

	seekable := c.state != "" && !c.fromStart
	for _, in := range c.inputs {
		if in == "-" {
			seekable = false
		}
	}
	if raw := f.eng.Checkpoint(); raw != nil && c.state != "" {
		cp, err := decodeCheckpoint(raw)
		if err != nil {
			return fmt.Errorf("state %s: %w", c.state, err)
		}
		if moved := cp.moveTo(j.State, j); len(moved) > 0 {
			fmt.Fprintf(f.env.stderr, "dedup filter: state %s was committed at another path; the job's files at the same places relative to it are its own: %s\n",
				c.state, strings.Join(moved, ", "))
		}
		f.prev = &cp
		// The same outputs and a position in a known file: a run over
		// other inputs may resume it where one of them is that file
		// (locate).
		f.relocatable = seekable && cp.sameOutputs(j) && cp.File < len(cp.Inputs) && (cp.Ino != 0 || cp.Sum != "")
		if seekable && cp.sameJob(j) {
			state := j.State
			*j = cp
			j.State = state
			f.resumed = true
		}
	}
	if err := f.locate(); err != nil {
		return err
	}
	if f.resumed && j.File < len(c.inputs) {
		f.resumedAt = fmt.Sprintf("%s byte %d, line %d", c.inputs[j.File], j.Offset, j.Line)
	}
	f.run0 = j.Counts
	return nil
}

// openOutputs opens --out, --dups and --rejects (see openOutput).
func (f *filterRun) openOutputs() error {
	c := f.cfg
	j := &f.job
	var err error
	if f.out, err = f.openOutput("--out", c.out, j.OutLen, f.prevOutput(j.Out, func(p *checkpoint) (string, int64) { return p.Out, p.OutLen })); err != nil {
		return err
	}
	if f.dups, err = f.openOutput("--dups", c.dups, j.DupsLen, f.prevOutput(j.Dups, func(p *checkpoint) (string, int64) { return p.Dups, p.DupsLen })); err != nil {
		return err
	}
	if f.rejects, err = f.openOutput("--rejects", c.rejects, j.RejectsLen, f.prevOutput(j.Rejects, func(p *checkpoint) (string, int64) { return p.Rejects, p.RejectsLen })); err != nil {
		return err
	}
	if f.rejects != nil {
		f.rejectsW = f.rejects
	} else {
		f.rejectsW = f.env.stderr
	}
	return nil
}
