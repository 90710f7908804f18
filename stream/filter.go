package stream

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
)

// Config is what a [Filter] does: what the flags of dedup filter say,
// without the engine's own options (the caller opens the engine). Its
// errors name the flag of dedup filter that is wrong.
type Config struct {
	// Inputs are the files to read, in order; "-" is Stdin (once at
	// most). dedup filter's default is {"-"}.
	Inputs []string
	// Out receives the distinct events ("-" is Stdout); Dups, if not "",
	// the duplicates; Rejects, if not "", the rejected lines as JSON
	// records (else Stderr, the first few).
	Out, Dups, Rejects string
	// State is the engine's state directory, "" for an engine in memory:
	// with it the outputs are fsynced before each commit and a run
	// resumes the last one's job from its [Checkpoint].
	State string
	// CommitEvery is the number of events between commits (at least 1);
	// CommitInterval the longest time between two (positive).
	CommitEvery    int
	CommitInterval time.Duration
	// Strict stops the run at the first rejected line, with an error
	// matching [ErrRejected], after committing what is before it.
	Strict bool
	// FromStart reads the inputs from their start, ignoring the
	// committed position (committed keys still count).
	FromStart bool
	// Overwrite truncates existing output files that a resumed job does
	// not own (refused otherwise when the state remembers keys).
	Overwrite bool
	// Chunk is the bytes read per batch, in [4096, 1<<28].
	Chunk int
	// Keys says where the key is; Time where the event time is, if the
	// engine runs on event time (Options.EventTime).
	Keys KeyConfig
	Time TimeConfig
	// Window is the engine's window (its Options.Window with the default
	// filled in): with Time, keys are committed before the events' time
	// passes a fraction of it.
	Window time.Duration
	// Stdin, Stdout and Stderr stand for "-" and for the notes, warnings
	// and rejects the run writes.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Interrupt, when not nil, stops the run at the next line boundary
	// after a value arrives (SIGINT, SIGTERM), with a commit and an error
	// matching [ErrInterrupted].
	Interrupt <-chan os.Signal
	// OnCommit, when not nil, is called with the duration of each
	// successful commit (the fsync of the outputs and the engine's
	// commit), from the goroutine that ran it.
	OnCommit func(time.Duration)
}

// Validate reports the first bad field of c by the flag of dedup filter
// that sets it, an error matching [ErrUsage]; an input or output that is
// another output (by the file's identity, whatever the names) is one too.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return marked{err, ErrUsage}
	}
	return nil
}

func (c *Config) validate() error {
	switch {
	case c.CommitEvery < 1:
		return fmt.Errorf("--commit-every %d: must be at least 1", c.CommitEvery)
	case c.CommitInterval <= 0:
		return fmt.Errorf("--commit-interval %v: must be positive", c.CommitInterval)
	case c.Keys.MaxLine < 1 || c.Keys.MaxLine > 1<<29:
		return fmt.Errorf("--max-line %d: must be in [1, %d]", c.Keys.MaxLine, 1<<29)
	case c.Keys.MaxKey < 1:
		return fmt.Errorf("--max-key %d: must be at least 1", c.Keys.MaxKey)
	case c.Chunk < 4096 || c.Chunk > 1<<28:
		return fmt.Errorf("--chunk %d: must be in [4096, %d]", c.Chunk, 1<<28)
	}
	stdin := 0
	for _, in := range c.Inputs {
		if in == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return errors.New("stdin (-) given more than once")
	}
	outs := map[string]string{}
	for _, o := range [][2]string{{"--out", c.Out}, {"--dups", c.Dups}, {"--rejects", c.Rejects}} {
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
	if err := c.checkSameFiles(c.Stdin, c.Stdout); err != nil {
		return err
	}
	_, err := c.keyer()
	return err
}

// checkSameFiles refuses an output that is an input or another output by
// the file's identity, whatever the names (a hard link, a symbolic link,
// stdin redirected from it, stdout appended to it): writing it would
// truncate, or feed, what is still to be read.
func (c *Config) checkSameFiles(stdin io.Reader, stdout io.Writer) error {
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
	for _, in := range c.Inputs {
		if in == "-" {
			if fi := stat(stdin); fi != nil {
				ins = append(ins, file{"stdin", fi})
			}
		} else if fi, err := os.Stat(in); err == nil {
			ins = append(ins, file{"input " + in, fi})
		}
	}
	var outs []file
	for _, o := range [][2]string{{"--out", c.Out}, {"--dups", c.Dups}, {"--rejects", c.Rejects}} {
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

// New prepares a run of the filter cfg describes over eng, an open
// engine whose Options.MaxKeySize is at least cfg.Keys.MaxKey and whose
// Options.EventTime is cfg.Time.Field != "". It validates cfg, resolves
// the job and whether it resumes the state's last one ([Checkpoint]),
// and opens the inputs and the outputs: what can fail is tried before
// anything is read. [Filter.Run] reads; [Filter.Close] ends the run. The
// engine stays the caller's: close it after Close.
func New(eng *dedup.Engine, cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	x, err := cfg.keyer()
	if err != nil {
		return nil, err
	}
	f := &Filter{cfg: &cfg, x: x, eng: eng, start: time.Now(), rejectWhy: map[rejectKey]int64{},
		durable: cfg.State != "", window: cfg.Window}
	if err := f.setup(); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if f.srcs, err = f.openSources(); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if err := f.openOutputs(); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

// keyer returns the Keyer of c.Keys and c.Time.
func (c *Config) keyer() (*Keyer, error) {
	x, err := NewKeyer(c.Keys)
	if err != nil {
		return nil, err
	}
	if err := x.setTime(c.Time, c.Keys.Delim); err != nil {
		return nil, err
	}
	return x, nil
}

// Run reads the inputs to their end (or to an interrupt, a --strict
// reject, an error), writing and committing as it goes; a last commit
// makes everything read durable. It is called once.
func (f *Filter) Run() error {
	err := f.loop(f.srcs)
	if err == nil && f.held > 0 {
		fmt.Fprintf(f.cfg.Stderr, "dedup: note: %s ends in a line without a newline (%d bytes), left for a later run: it is read once it is whole\n",
			f.cfg.Inputs[len(f.cfg.Inputs)-1], f.held)
	}
	return err
}

// Close waits for the commit in flight and closes the outputs and the
// inputs; it reports the first error. It does not close the engine.
func (f *Filter) Close() error {
	err := f.waitCommit()
	for i := len(f.closers) - 1; i >= 0; i-- {
		if cerr := f.closers[i](); cerr != nil && err == nil {
			err = cerr
		}
	}
	f.closers = nil
	f.noteHiddenRejects()
	return err
}

// Counts returns this run's counters so far (not the job's, which
// resumed runs add up in the [Checkpoint]). It is safe to call from any
// goroutine while Run runs.
func (f *Filter) Counts() Counts {
	return Counts{
		Events:     f.pub.events.Load(),
		Distinct:   f.pub.distinct.Load(),
		Duplicates: f.pub.dups.Load(),
		Rejects:    f.pub.rejects.Load(),
		Bytes:      f.pub.bytes.Load(),
	}
}

// InputSize returns the bytes this run has to read, -1 if unknown (a
// stream among the inputs).
func (f *Filter) InputSize() int64 { return f.totalSize }

// ResumedAt returns where this run resumed its job ("app.log byte 4096,
// line 17"), or "" if it starts one.
func (f *Filter) ResumedAt() string {
	if !f.resumed {
		return ""
	}
	return f.resumedAt
}

// Filter is one run of a stream filter over an engine: it reads its
// inputs, writes each distinct event to its output once, and commits the
// keys with its position (see the package doc).
type Filter struct {
	cfg   *Config
	x     *Keyer
	eng   *dedup.Engine
	start time.Time

	job       Checkpoint // identity and position, updated as we go
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

	run0 Counts // job counters at the start of this run
	// The engine goroutine's commit counters (see loop).
	sinceCmt int // events since the last commit barrier
	lastCmt  time.Time

	durable   bool       // a state directory: fsync outputs before commits
	cmtDone   chan error // the commit running in the background, nil if none
	totalSize int64      // input bytes to read in this run, -1 if unknown

	srcs    []source    // the inputs, opened by New
	prev    *Checkpoint // the state's last checkpoint, nil if none
	inFiles []*os.File  // the inputs that are regular files, by index (identity)
	held    int         // bytes of a last line left unread at the end (source.holdTail)
	// rejectWhy counts this run's rejects by reason, for the verdict on a
	// run that rejected most of its lines (Verdict).
	rejectWhy map[rejectKey]int64
	// window is the engine's Window, for --time-field (eventtime.go);
	// cmtAt is the event time (Unix ns) after which keys were last
	// committed, 0 before any.
	window time.Duration
	cmtAt  int64
	// times holds a group's event times for ObserveBatchTimes.
	times []time.Time

	// Published for progress and metrics.
	pub struct {
		events, distinct, dups, rejects, bytes atomic.Int64
	}
}

// setup resolves the job and decides whether this run resumes the
// state's last one: the same inputs and outputs, files all, and no
// --from-start; or the same outputs and inputs that start with the file
// of its position, rotated since (locate).
func (f *Filter) setup() error {
	c := f.cfg
	abs := func(name string) (string, error) {
		if name == "" || name == "-" {
			return name, nil
		}
		return filepath.Abs(name)
	}
	j := &f.job
	for _, in := range c.Inputs {
		a, err := abs(in)
		if err != nil {
			return err
		}
		j.Inputs = append(j.Inputs, a)
	}
	var err error
	if j.Out, err = abs(c.Out); err != nil {
		return err
	}
	if j.Dups, err = abs(c.Dups); err != nil {
		return err
	}
	if j.Rejects, err = abs(c.Rejects); err != nil {
		return err
	}
	j.Line = 1
	if c.State != "" {
		if j.State, err = filepath.Abs(c.State); err != nil {
			return err
		}
	}

	seekable := c.State != "" && !c.FromStart
	for _, in := range c.Inputs {
		if in == "-" {
			seekable = false
		}
	}
	if raw := f.eng.Checkpoint(); raw != nil && c.State != "" {
		cp, err := DecodeCheckpoint(raw)
		if err != nil {
			return fmt.Errorf("state %s: %w", c.State, err)
		}
		if moved := cp.moveTo(j.State, j); len(moved) > 0 {
			fmt.Fprintf(f.cfg.Stderr, "dedup filter: state %s was committed at another path; the job's files at the same places relative to it are its own: %s\n",
				c.State, strings.Join(moved, ", "))
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
	if f.resumed && j.File < len(c.Inputs) {
		f.resumedAt = fmt.Sprintf("%s byte %d, line %d", c.Inputs[j.File], j.Offset, j.Line)
	}
	f.run0 = j.Counts
	return nil
}

// openOutputs opens --out, --dups and --rejects (see openOutput).
func (f *Filter) openOutputs() error {
	c := f.cfg
	j := &f.job
	var err error
	if f.out, err = f.openOutput("--out", c.Out, j.OutLen, f.prevOutput(j.Out, func(p *Checkpoint) (string, int64) { return p.Out, p.OutLen })); err != nil {
		return err
	}
	if f.dups, err = f.openOutput("--dups", c.Dups, j.DupsLen, f.prevOutput(j.Dups, func(p *Checkpoint) (string, int64) { return p.Dups, p.DupsLen })); err != nil {
		return err
	}
	if f.rejects, err = f.openOutput("--rejects", c.Rejects, j.RejectsLen, f.prevOutput(j.Rejects, func(p *Checkpoint) (string, int64) { return p.Rejects, p.RejectsLen })); err != nil {
		return err
	}
	if f.rejects != nil {
		f.rejectsW = f.rejects
	} else {
		f.rejectsW = f.cfg.Stderr
	}
	return nil
}
