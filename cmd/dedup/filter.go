package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
)

// filterConfig is what the flags of `dedup filter` say.
type filterConfig struct {
	inputs         stringList
	out            string
	dups           string
	rejects        string
	state          string
	window         time.Duration
	rate           float64
	fp             float64
	filter         string
	probabilistic  bool
	generations    int
	shards         int
	commitEvery    int
	commitInterval time.Duration
	strict         bool
	stats          bool
	metrics        string
	progress       string
	fromStart      bool
	chunk          int
	keys           extractorConfig
	// snapshotInterval is the period of filter snapshots with --state.
	snapshotInterval time.Duration
	// explicit holds the names of the flags given on the command line.
	explicit map[string]bool
}

// groupSize is the number of keys per ObserveBatch.
const groupSize = 1024

// bufSize is the size of the output buffers.
const bufSize = 1 << 20

// defaultChunk is --chunk: a batch of 256 KiB, read, scanned and written
// again, stays in the caches between its passes; against 1 MiB the whole
// command used x1.11 less CPU (probabilistic; x1.07 exact), and 512 KiB
// and 128 KiB were both slower (BenchmarkFilter, alternating runs).
const defaultChunk = 256 << 10

// nbatch is the number of batches in the pipeline (see filterRun.loop).
const nbatch = 6

// maxInFlight bounds the engine's keys in flight for a run: those of the
// commit running in the background and of the next one (each at most
// --commit-every events and a group), and those observed ahead of the
// writer (nbatch batches of at most chunk/2 keys: a key takes a byte and a
// newline at least). It is a guard, not an allocation.
func maxInFlight(c *filterConfig) int {
	return max(1<<20, 2*(c.commitEvery+groupSize)+nbatch*(c.chunk/2+1))
}

func newFilterFlags(e *env) (*flag.FlagSet, *filterConfig) {
	c := &filterConfig{}
	fs := flag.NewFlagSet("dedup filter", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Var(&c.inputs, "in", "input `FILE` (repeatable; positional arguments too; - or none is stdin)")
	fs.StringVar(&c.out, "out", "-", "write distinct events to `FILE` (- is stdout)")
	fs.StringVar(&c.dups, "dups", "", "write duplicate events to `FILE`")
	fs.StringVar(&c.rejects, "rejects", "", "write rejected lines to `FILE` (default stderr)")
	fs.StringVar(&c.state, "state", "", "state `DIR`: remember keys across runs and resume after a crash (default: in memory)")
	fs.StringVar(&c.keys.format, "format", "json", "input format: json (NDJSON, one object per line) or lines")
	fs.StringVar(&c.keys.key, "key", "", "json: key `PATHS`, dotted, comma-separated (event_id, user.id,seq)")
	fs.IntVar(&c.keys.field, "field", 0, "lines: key is field `N` (from 1) of --delim separated fields")
	fs.StringVar(&c.keys.delim, "delim", "\t", "lines: field delimiter for --field")
	fs.StringVar(&c.keys.regex, "regex", "", "lines: key is the first group (or the match) of `RE`")
	fs.IntVar(&c.keys.maxKey, "max-key", 4096, "reject keys over `N` bytes")
	fs.IntVar(&c.keys.maxLine, "max-line", 16<<20, "reject lines over `N` bytes")
	fs.DurationVar(&c.window, "window", engineDefaults.Window, "remember keys for `DURATION`")
	fs.Float64Var(&c.rate, "rate", engineDefaults.ExpectedRate, "expected distinct keys per `SECOND` (filter sizing)")
	fs.Float64Var(&c.fp, "fp", engineDefaults.FalsePositiveRate, "pre-filter false-positive `RATE`")
	fs.StringVar(&c.filter, "filter", engineDefaults.Filter, "pre-filter: blocked, bloom or cuckoo")
	fs.BoolVar(&c.probabilistic, "probabilistic", false, "no exact store: a filter hit is a duplicate (drops about --fp of new events, faster)")
	fs.IntVar(&c.generations, "generations", engineDefaults.Generations, "generations the window is cut into")
	fs.IntVar(&c.shards, "shards", engineDefaults.Shards, "engine shards")
	fs.IntVar(&c.commitEvery, "commit-every", 100000, "commit after `N` events")
	fs.DurationVar(&c.commitInterval, "commit-interval", time.Second, "commit at least every `DURATION`")
	fs.BoolVar(&c.strict, "strict", false, "stop with exit status 2 at the first rejected line")
	fs.BoolVar(&c.stats, "stats", false, "print a summary on stderr at the end")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (e.g. :9090) at /metrics")
	fs.StringVar(&c.progress, "progress", "auto", "progress bar on stderr: auto (when a terminal), always, never")
	fs.BoolVar(&c.fromStart, "from-start", false, "ignore the committed position: read the inputs from the start (committed keys still count)")
	fs.IntVar(&c.chunk, "chunk", defaultChunk, "read `BYTES` per batch")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", time.Minute, "with --state: snapshot the filters every `DURATION` and at the end, so a restart loads them instead of rebuilding (0: only at the end)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), filterHelpHead)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), filterHelpTail)
	}
	return fs, c
}

func runFilter(e *env, args []string) error {
	fs, c := newFilterFlags(e)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr(err)
	}
	c.explicit = explicitFlags(fs)
	c.inputs = append(c.inputs, pos...)
	if len(c.inputs) == 0 {
		c.inputs = stringList{"-"}
	}
	if err := c.validate(); err != nil {
		return usageErr(err)
	}
	x, err := newExtractor(c.keys)
	if err != nil {
		return usageErr(err)
	}
	f := &filterRun{env: e, cfg: c, x: x, start: time.Now()}
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
		for _, in := range c.inputs {
			if ain, err := filepath.Abs(in); err == nil && in != "-" && ain == abs {
				return fmt.Errorf("%s %s is also an input", o[0], o[1])
			}
		}
	}
	return nil
}

// output is one output stream with the length written so far.
type output struct {
	name string // as given
	f    *os.File
	w    *bufio.Writer
	n    int64 // bytes written, buffered included
	sync bool  // fsync before each commit (a regular file)
}

func (o *output) write(p []byte) error {
	_, err := o.w.Write(p)
	o.n += int64(len(p))
	return err
}

// flush writes the buffer out to the file (the commit fsyncs it).
func (o *output) flush() error {
	if o == nil {
		return nil
	}
	if err := o.w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", o.name, err)
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

	out, dups, rejects *output
	rejectsW           io.Writer // where reject records go
	closers            []func() error

	run0 counts // job counters at the start of this run
	// The engine goroutine's commit counters (see loop).
	sinceCmt int // events since the last commit barrier
	lastCmt  time.Time

	durable   bool       // a state directory: fsync outputs before commits
	cmtDone   chan error // the commit running in the background, nil if none
	totalSize int64      // input bytes to read in this run, -1 if unknown

	// Published for progress and metrics.
	pub struct {
		events, distinct, dups, rejects, bytes atomic.Int64
	}
}

func (f *filterRun) run() (err error) {
	c := f.cfg
	opts := dedup.Options{
		Dir:               c.state,
		Window:            c.window,
		ExpectedRate:      c.rate,
		FalsePositiveRate: c.fp,
		Filter:            c.filter,
		Probabilistic:     c.probabilistic,
		Generations:       c.generations,
		Shards:            c.shards,
		MaxInFlight:       maxInFlight(c),
		MaxKeySize:        c.keys.maxKey,
	}
	if c.state != "" {
		// An existing state keeps its shape: adopt what the flags leave
		// unsaid, refuse what they contradict.
		if err := adoptState(c.state, c.explicit, &opts); err != nil {
			return err
		}
		opts.SnapshotInterval = c.snapshotInterval // Close writes a last one too
		opts.Logf = engineLog(f.env)
	}
	if f.eng, err = dedup.Open(opts); err != nil {
		err = openErr(c.state, err)
		var xe *exitError
		if errors.As(err, &xe) {
			return err
		}
		return fmt.Errorf("open state: %w", err)
	}
	f.durable = c.state != ""
	defer func() {
		if werr := f.waitCommit(); werr != nil && err == nil {
			err = werr
		}
		for i := len(f.closers) - 1; i >= 0; i-- {
			if cerr := f.closers[i](); cerr != nil && err == nil {
				err = cerr
			}
		}
		// With periodic snapshots Close writes a last one. Without, write
		// it here, after a run that ended well (or was interrupted, its
		// state committed), so that the next start loads it.
		if f.durable && opts.SnapshotInterval == 0 && (err == nil || errors.Is(err, errInterrupted)) {
			if serr := f.eng.Snapshot(); serr != nil {
				err = errors.Join(err, fmt.Errorf("final snapshot: %w", serr))
			}
		}
		if cerr := f.eng.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close state: %w", cerr)
		}
	}()
	if err := f.setup(); err != nil {
		return err
	}
	stopMetrics, err := f.serveMetrics()
	if err != nil {
		return err
	}
	f.closers = append(f.closers, stopMetrics)
	srcs, err := f.openSources()
	if err != nil {
		return err
	}
	stopProgress := f.startProgress()
	err = f.loop(srcs)
	stopProgress()
	if c.stats {
		f.printStats()
	}
	return err
}

// setup resolves the job, decides whether to resume, and opens outputs.
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
		if seekable && cp.sameJob(j) {
			*j = cp
			f.resumed = true
			if j.File < len(c.inputs) {
				f.resumedAt = fmt.Sprintf("%s byte %d, line %d", c.inputs[j.File], j.Offset, j.Line)
			}
		}
	}
	f.run0 = j.Counts

	if f.out, err = f.openOutput(c.out, j.OutLen); err != nil {
		return err
	}
	if f.dups, err = f.openOutput(c.dups, j.DupsLen); err != nil {
		return err
	}
	if f.rejects, err = f.openOutput(c.rejects, j.RejectsLen); err != nil {
		return err
	}
	if f.rejects != nil {
		f.rejectsW = f.rejects
	} else {
		f.rejectsW = f.env.stderr
	}
	return nil
}

// Write makes output an io.Writer (for reject records).
func (o *output) Write(p []byte) (int, error) {
	if err := o.write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// openOutput opens name ("" none, "-" stdout): truncated to committed when
// resuming, else created empty.
func (f *filterRun) openOutput(name string, committed int64) (*output, error) {
	switch name {
	case "":
		return nil, nil
	case "-":
		o := &output{name: "<stdout>", w: bufio.NewWriterSize(f.env.stdout, bufSize)}
		f.closers = append(f.closers, func() error { return o.flush() })
		return o, nil
	}
	var fl *os.File
	var err error
	if f.resumed {
		fl, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	} else {
		fl, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, fl.Close)
	fi, err := fl.Stat()
	if err != nil {
		return nil, err
	}
	regular := fi.Mode().IsRegular()
	if f.resumed && regular {
		if fi.Size() < committed {
			return nil, fmt.Errorf("%s holds %d bytes but %d were committed: it was changed since; use a new output or --from-start",
				name, fi.Size(), committed)
		}
		// Do-then-mark: what lies past the committed length was written
		// by a run that crashed before committing it; its events are New
		// again and will be written again.
		if err := fl.Truncate(committed); err != nil {
			return nil, fmt.Errorf("truncate %s: %w", name, err)
		}
		if _, err := fl.Seek(committed, io.SeekStart); err != nil {
			return nil, fmt.Errorf("seek %s: %w", name, err)
		}
		if err := fl.Sync(); err != nil {
			return nil, fmt.Errorf("fsync %s: %w", name, err)
		}
	}
	o := &output{name: name, f: fl, w: bufio.NewWriterSize(fl, bufSize), sync: regular}
	if f.resumed {
		o.n = committed
	}
	f.closers = append(f.closers, func() error { return o.flush() })
	return o, nil
}

// openSources opens the inputs still to read, at the job's position, and
// sums their sizes (-1 if unknown) for the progress bar.
func (f *filterRun) openSources() ([]source, error) {
	c := f.cfg
	j := &f.job
	var srcs []source
	f.totalSize = 0
	for i := j.File; i < len(c.inputs); i++ {
		r, closeFn, fi, err := openInput(c.inputs[i], f.env.stdin)
		if err != nil {
			return nil, fmt.Errorf("open input: %w", err)
		}
		f.closers = append(f.closers, closeFn)
		src := source{name: c.inputs[i], r: r, line: 1}
		if fi == nil || !fi.Mode().IsRegular() {
			f.totalSize = -1
		} else if f.totalSize >= 0 {
			f.totalSize += fi.Size()
		}
		if i == j.File && f.resumed {
			if fi == nil || fi.Size() < j.Offset {
				return nil, fmt.Errorf("input %s is shorter than the committed offset %d: it was changed since; use --from-start", c.inputs[i], j.Offset)
			}
			if _, err := r.(io.Seeker).Seek(j.Offset, io.SeekStart); err != nil {
				return nil, fmt.Errorf("seek input %s: %w", c.inputs[i], err)
			}
			src.off, src.line = j.Offset, j.Line
			if f.totalSize >= 0 {
				f.totalSize -= j.Offset
			}
		}
		srcs = append(srcs, src)
	}
	return srcs, nil
}

// errInterrupted ends a run stopped by SIGINT or SIGTERM, after a commit.
var errInterrupted = errors.New("interrupted; state committed, run the same command again to resume")

// loop runs the reader over srcs, observes its batches' keys on this
// goroutine and writes their lines on another (write), so that the engine's
// work and the output's overlap: three stages, reader -> engine -> writer.
//
// Commit points are chosen here, where the keys are observed: after the
// group of keys that makes a commit due, a Barrier marks exactly the keys
// observed so far, and the batch carries a mark at the line after that
// group. The writer, on reaching the mark, has written every line before it
// and commits through that barrier with that position (do, then mark).
func (f *filterRun) loop(srcs []source) error {
	c := f.cfg
	j := &f.job
	if len(srcs) == 0 {
		return nil // the job is complete
	}
	full := make(chan *batch, 2)
	free := make(chan *batch, nbatch)
	done := make(chan struct{})
	for range nbatch {
		free <- &batch{}
	}
	rd := &reader{srcs: srcs, first: j.File, x: f.x, chunk: c.chunk, full: full, free: free, done: done,
		workers: min(runtime.GOMAXPROCS(0), 4)}
	go rd.run()
	defer func() {
		close(done)
		for range full { // wait for the reader to finish
		}
	}()

	wq := make(chan work, nbatch)
	wres := make(chan error, 1)
	go func() { wres <- f.write(wq, free) }()
	// send hands w to the writer; false if the writer has stopped (its
	// result is then in werr).
	var werr error
	wdone := false
	send := func(w work) bool {
		select {
		case wq <- w:
			return true
		case werr = <-wres:
			wdone = true
			return false
		}
	}
	// finish ends the run: the writer commits through a last barrier, after
	// every line sent, and reports err (nil, errInterrupted or a read error).
	finish := func(err error) error {
		if !wdone && send(work{final: true, bar: f.eng.Barrier(), err: err}) {
			werr = <-wres
		}
		return werr
	}

	f.lastCmt = time.Now()
	tick := time.NewTicker(min(c.commitInterval, 250*time.Millisecond))
	defer tick.Stop()
	for {
		var b *batch
		var ok bool
		select {
		case b, ok = <-full:
		case <-tick.C:
			if f.sinceCmt > 0 && time.Since(f.lastCmt) >= c.commitInterval {
				if !send(work{bar: f.barrier()}) {
					return werr
				}
			}
			continue
		case <-f.env.sigs:
			return finish(errInterrupted)
		case werr = <-wres:
			return werr // the writer failed
		}
		if !ok {
			return finish(nil)
		}
		stop := f.observe(b)
		rerr := b.err
		if !send(work{b: b}) {
			return werr
		}
		if stop {
			return <-wres // the writer ends the run at the batch's last mark
		}
		if rerr != nil {
			return finish(rerr)
		}
		select {
		case <-f.env.sigs:
			return finish(errInterrupted)
		default:
		}
	}
}

// work is what the engine goroutine hands the writer: a batch with its
// verdicts and marks, or, with b nil, a commit through bar at the position
// reached (final: the last one, waited for; the run then ends with err).
type work struct {
	b     *batch
	bar   dedup.Barrier
	final bool
	err   error
}

// markKind says what the writer does on reaching a mark.
type markKind uint8

const (
	markCommit markKind = iota // commit through bar, in the background
	markStrict                 // --strict: commit through bar, stop at the rejected line
	markFail                   // the engine failed observing from this line: stop with err
)

// mark is a point between the lines of a batch: before line li.
type mark struct {
	li   int
	kind markKind
	bar  dedup.Barrier
	err  error
}

// barrier marks the keys observed so far for a commit and restarts the
// commit counters.
func (f *filterRun) barrier() dedup.Barrier {
	f.sinceCmt = 0
	f.lastCmt = time.Now()
	return f.eng.Barrier()
}

// observe feeds the keys of b through the engine in groups, filling
// b.verdicts, and marks b where a commit falls due. It returns true if the
// run ends within b (a --strict reject, an engine error): nothing past that
// point is observed.
func (f *filterRun) observe(b *batch) (stop bool) {
	c := f.cfg
	b.marks = b.marks[:0]
	if cap(b.verdicts) < len(b.keys) {
		b.verdicts = make([]dedup.Verdict, len(b.keys), cap(b.keys))
	}
	b.verdicts = b.verdicts[:len(b.keys)]
	// Under --strict nothing past the first reject is observed: its keys
	// must not be committed with the position before it.
	endLine, nkeys := len(b.lines), len(b.keys)
	if c.strict && len(b.rejects) > 0 {
		endLine = int(b.rejects[0].line)
		for nkeys > 0 && int(b.keyLine[nkeys-1]) > endLine {
			nkeys--
		}
	}
	li := 0
	for ki := 0; ki < nkeys || li < endLine; {
		k1 := min(ki+groupSize, nkeys)
		next := endLine // the group takes the lines up to its last key, or to the end
		if k1 < nkeys {
			next = int(b.keyLine[k1-1]) + 1
		}
		if k1 > ki {
			if err := f.eng.ObserveBatch(b.keys[ki:k1], b.verdicts[ki:k1]); err != nil {
				err = fmt.Errorf("%s:%d: %w", displayName(c.inputs[b.file]), b.firstLine+int64(b.keyLine[ki]), err)
				b.marks = append(b.marks, mark{li: li, kind: markFail, err: err})
				return true
			}
		}
		f.sinceCmt += next - li
		li, ki = next, k1
		if f.sinceCmt >= c.commitEvery || time.Since(f.lastCmt) >= c.commitInterval {
			b.marks = append(b.marks, mark{li: li, kind: markCommit, bar: f.barrier()})
		}
	}
	if endLine < len(b.lines) {
		b.marks = append(b.marks, mark{li: endLine, kind: markStrict, bar: f.eng.Barrier()})
		return true
	}
	if b.endFile && b.file < len(f.job.Inputs)-1 {
		f.sinceCmt++ // the position moves to the next input: commit it
	}
	return false
}

// write is the writer goroutine: it writes each batch's lines where their
// verdicts send them, commits at the marks, and hands the batches back to
// the reader. Its result ends the run.
func (f *filterRun) write(wq <-chan work, free chan<- *batch) error {
	for {
		var w work
		select {
		case w = <-wq:
		default:
			// Nothing queued: let the output reach its reader now.
			if err := f.flushAll(); err != nil {
				return err
			}
			w = <-wq
		}
		if w.b == nil {
			if !w.final {
				if err := f.commit(w.bar); err != nil {
					return err
				}
				continue
			}
			cerr := f.commitSync(w.bar)
			if errors.Is(w.err, errInterrupted) && cerr != nil {
				return cerr
			}
			return errors.Join(w.err, cerr)
		}
		end, err := f.writeBatch(w.b)
		if err != nil || end {
			return err
		}
		free <- w.b
	}
}

// writeBatch writes the lines of b and acts on its marks; end reports that
// the run ends with b (with err, nil or not).
func (f *filterRun) writeBatch(b *batch) (end bool, err error) {
	j := &f.job
	ki, ri, mi := 0, 0, 0
	for li := 0; ; li++ {
		for ; mi < len(b.marks) && b.marks[mi].li == li; mi++ {
			m := b.marks[mi]
			switch m.kind {
			case markCommit:
				f.advance(b, li)
				if err := f.commit(m.bar); err != nil {
					return true, err
				}
			case markStrict:
				return true, f.strictStop(b, li, m.bar)
			case markFail:
				f.advance(b, li)
				return true, m.err
			}
		}
		if li == len(b.lines) {
			break
		}
		ln := b.lines[li]
		line := b.buf[ln.start:ln.end]
		if int64(ln.end) < ln.next && int(ln.next) <= len(b.buf) {
			line = b.buf[ln.start : ln.end+1] // with its newline: one copy
		}
		if ri < len(b.rejects) && int(b.rejects[ri].line) == li {
			if err := f.writeReject(b, li, b.rejects[ri].r); err != nil {
				return true, err
			}
			ri++
			j.Counts.Rejects++
		} else {
			var err error
			switch b.verdicts[ki] {
			case dedup.New:
				err = f.writeLine(f.out, line)
				j.Counts.Distinct++
			default: // Duplicate, or InFlight: a copy of a key written since the last commit
				if f.dups != nil {
					err = f.writeLine(f.dups, line)
				}
				j.Counts.Duplicates++
			}
			if err != nil {
				return true, err
			}
			ki++
		}
		j.Counts.Events++
	}
	f.advance(b, len(b.lines))
	if b.endFile && b.file < len(j.Inputs)-1 {
		// On to the next input. The last input keeps its end as the
		// position, so that a run after it grew reads only what was
		// appended.
		j.File, j.Offset, j.Line = b.file+1, 0, 1
	}
	return false, nil
}

// advance moves the job's position past the first n lines of b.
func (f *filterRun) advance(b *batch, n int) {
	j := &f.job
	consumed := int64(0)
	if n > 0 {
		consumed = b.lines[n-1].next
	}
	j.File = b.file
	j.Counts.Bytes += b.off + consumed - j.Offset
	j.Offset = b.off + consumed
	j.Line = b.firstLine + int64(n)
	f.publish()
}

func (f *filterRun) publish() {
	cn := &f.job.Counts
	f.pub.events.Store(cn.Events - f.run0.Events)
	f.pub.distinct.Store(cn.Distinct - f.run0.Distinct)
	f.pub.dups.Store(cn.Duplicates - f.run0.Duplicates)
	f.pub.rejects.Store(cn.Rejects - f.run0.Rejects)
	f.pub.bytes.Store(cn.Bytes - f.run0.Bytes)
}

// writeLine writes line, which ends with its newline or gets one.
func (f *filterRun) writeLine(o *output, line []byte) error {
	if err := o.write(line); err != nil {
		return fmt.Errorf("write %s: %w", o.name, err)
	}
	if len(line) == 0 || line[len(line)-1] != '\n' {
		if err := o.w.WriteByte('\n'); err != nil {
			return fmt.Errorf("write %s: %w", o.name, err)
		}
		o.n++
	}
	return nil
}

// rejectRecord formats a rejected line: "NAME:LINE: REASON\tTEXT", TEXT
// being the line cut to rejectShow bytes ("..." marks a cut).
func (f *filterRun) rejectRecord(b *batch, li int, r reject) []byte {
	ln := b.lines[li]
	text := b.buf[ln.start:ln.end]
	cut := len(text) > rejectShow || r.code == rejLineTooLong
	if len(text) > rejectShow {
		text = text[:rejectShow]
	}
	rec := fmt.Appendf(nil, "%s:%d: %s\t", displayName(f.cfg.inputs[b.file]), b.firstLine+int64(li), r.describe(f.x))
	rec = append(rec, text...)
	if cut {
		rec = append(rec, "..."...)
	}
	return append(rec, '\n')
}

func (f *filterRun) writeReject(b *batch, li int, r reject) error {
	if _, err := f.rejectsW.Write(f.rejectRecord(b, li, r)); err != nil {
		return fmt.Errorf("write rejects: %w", err)
	}
	return nil
}

// strictStop commits the position before line li of b, with the keys
// before barrier bar, and reports the rejected line.
func (f *filterRun) strictStop(b *batch, li int, bar dedup.Barrier) error {
	f.advance(b, li)
	cerr := f.commitSync(bar)
	var r reject
	for _, ra := range b.rejects {
		if int(ra.line) == li {
			r = ra.r
		}
	}
	err := fmt.Errorf("--strict: %s:%d: %s", displayName(f.cfg.inputs[b.file]), b.firstLine+int64(li), r.describe(f.x))
	return errors.Join(&exitError{code: exitBad, err: err}, cerr)
}

func (f *filterRun) flushAll() error {
	for _, o := range []*output{f.out, f.dups, f.rejects} {
		if err := o.flush(); err != nil {
			return err
		}
	}
	return nil
}

// commit is the do-then-mark step: the outputs are written and fsynced up
// to the current position first, then the engine commits the keys observed
// before bar together with that position and those lengths. The engine
// goroutine took bar right after observing the keys of the lines before
// the current position, and no key after them.
//
// It runs in the background so that reading, observing and writing go on:
// here the outputs are flushed to the operating system; a goroutine then
// fsyncs the outputs (which covers at least the lengths recorded here) and
// commits exactly the keys before the barrier (CommitThrough) with the
// checkpoint. At most one commit runs at a time; commitSync waits for it.
func (f *filterRun) commit(bar dedup.Barrier) error {
	if err := f.flushAll(); err != nil {
		return err
	}
	j := &f.job
	if f.out != nil {
		j.OutLen = f.out.n
	}
	if f.dups != nil {
		j.DupsLen = f.dups.n
	}
	if f.rejects != nil {
		j.RejectsLen = f.rejects.n
	}
	cp := j.encode()
	if err := f.waitCommit(); err != nil {
		return err
	}
	done := make(chan error, 1)
	f.cmtDone = done
	go func() {
		err := f.syncOutputs()
		if err == nil {
			if err = f.eng.CommitThrough(bar, cp); err != nil {
				err = fmt.Errorf("commit: %w", err)
			}
		}
		done <- err
	}()
	return nil
}

// waitCommit waits for the commit running in the background, if any.
func (f *filterRun) waitCommit() error {
	if f.cmtDone == nil {
		return nil
	}
	err := <-f.cmtDone
	f.cmtDone = nil
	return err
}

// commitSync commits and waits until it is durable.
func (f *filterRun) commitSync(bar dedup.Barrier) error {
	return errors.Join(f.commit(bar), f.waitCommit())
}

// syncOutputs fsyncs the outputs of a state-keeping run.
func (f *filterRun) syncOutputs() error {
	if !f.durable {
		return nil
	}
	for _, o := range []*output{f.out, f.dups, f.rejects} {
		if o != nil && o.sync {
			if err := o.f.Sync(); err != nil {
				return fmt.Errorf("fsync %s: %w", o.name, err)
			}
		}
	}
	return nil
}

// printStats prints the end-of-run summary on stderr.
func (f *filterRun) printStats() {
	st := f.eng.Stats()
	el := time.Since(f.start)
	ev := f.pub.events.Load()
	pct := func(n int64) string {
		if ev == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(ev))
	}
	by := f.pub.bytes.Load()
	w := f.env.stderr
	if f.resumed {
		fmt.Fprintf(w, "resumed at      %s\n", f.resumedAt)
	}
	fmt.Fprintf(w, "events          %d\n", ev)
	fmt.Fprintf(w, "distinct        %d%s\n", f.pub.distinct.Load(), pct(f.pub.distinct.Load()))
	fmt.Fprintf(w, "duplicates      %d%s\n", f.pub.dups.Load(), pct(f.pub.dups.Load()))
	fmt.Fprintf(w, "rejects         %d%s\n", f.pub.rejects.Load(), pct(f.pub.rejects.Load()))
	fmt.Fprintf(w, "store lookups   %d\n", st.StoreLookups)
	fmt.Fprintf(w, "false positives %d\n", st.FalsePositives)
	fmt.Fprintf(w, "commits         %d (mean %v)\n", st.Commits, st.CommitLatencyMean.Round(time.Microsecond))
	fmt.Fprintf(w, "elapsed         %v\n", el.Round(time.Millisecond))
	fmt.Fprintf(w, "throughput      %.1f MB/s, %s events/s\n", float64(by)/1e6/el.Seconds(), strconv.FormatFloat(float64(ev)/el.Seconds(), 'f', 0, 64))
}
