package stream

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/streamdedup/dedup"
)

// groupSize is the number of keys per ObserveBatch.
const groupSize = 1024

// nbatch is the number of batches in the pipeline (see filterRun.loop).
const nbatch = 6

// MaxInFlight returns the engine's Options.MaxInFlight a run of c needs:
// the keys of the commit running in the background and of the next one
// (each at most CommitEvery events and a group), and those observed ahead
// of the writer (nbatch batches of at most Chunk/2 keys: a key takes a
// byte and a newline at least). It is a guard, not an allocation.
func MaxInFlight(c *Config) int {
	return max(1<<20, 2*(c.CommitEvery+groupSize)+nbatch*(c.Chunk/2+1))
}

// interruptedErr is ErrInterrupted with what is true of this run: without
// a state nothing is remembered, and stdin cannot be resumed.
func (f *Filter) interruptedErr() error {
	switch {
	case !f.durable:
		return ErrInterrupted
	case slices.Contains(f.cfg.Inputs, "-"):
		return fmt.Errorf("%w; the keys read so far are committed (stdin cannot be resumed: a rerun counts them as duplicates)", ErrInterrupted)
	}
	return fmt.Errorf("%w; state committed, run the same command again to resume", ErrInterrupted)
}

// loop runs the reader over srcs, observes its batches' keys on this
// goroutine and writes their lines on another (write), so that the engine's
// work and the output's overlap: three stages, reader -> engine -> writer.
//
// Commit points are chosen here, where the keys are observed: after the
// group of keys that makes a commit due, a Barrier marks exactly the keys
// observed so far, and the batch carries a mark at the line after that
// group. The writer, on reaching the mark, has written every line before it
// and commits through that barrier with that position (do, then mark).
func (f *Filter) loop(srcs []source) error {
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
	rd := &reader{srcs: srcs, first: j.File, x: f.x, chunk: c.Chunk, full: full, free: free, done: done,
		workers: min(runtime.GOMAXPROCS(0), 4)}
	go rd.run()
	interrupted := false
	defer func() {
		close(done)
		if interrupted {
			// The reader may be blocked reading an idle pipe or terminal
			// that no signal interrupts: leave it; it stops when its read
			// returns, and the process ends before that anyway.
			return
		}
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
	// every line sent, and reports err (nil, ErrInterrupted or a read error).
	finish := func(err error) error {
		if !wdone && send(work{final: true, bar: f.eng.Barrier(), err: err}) {
			werr = <-wres
		}
		return werr
	}

	f.lastCmt = time.Now()
	tick := time.NewTicker(min(c.CommitInterval, 250*time.Millisecond))
	defer tick.Stop()
	for {
		var b *batch
		var ok bool
		select {
		case b, ok = <-full:
		case <-tick.C:
			if f.sinceCmt > 0 && time.Since(f.lastCmt) >= c.CommitInterval {
				if !send(work{bar: f.barrier()}) {
					return werr
				}
			}
			continue
		case <-f.cfg.Interrupt:
			interrupted = true
			return finish(f.interruptedErr())
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
		case <-f.cfg.Interrupt:
			interrupted = true
			return finish(f.interruptedErr())
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
func (f *Filter) barrier() dedup.Barrier {
	f.sinceCmt = 0
	f.lastCmt = time.Now()
	return f.eng.Barrier()
}

// observe feeds the keys of b through the engine in groups, filling
// b.verdicts, and marks b where a commit falls due. It returns true if the
// run ends within b (a --strict reject, an engine error): nothing past that
// point is observed.
func (f *Filter) observe(b *batch) (stop bool) {
	c := f.cfg
	b.marks = b.marks[:0]
	if cap(b.verdicts) < len(b.keys) {
		b.verdicts = make([]dedup.Verdict, len(b.keys), cap(b.keys))
	}
	b.verdicts = b.verdicts[:len(b.keys)]
	// Under --strict nothing past the first reject is observed: its keys
	// must not be committed with the position before it.
	endLine, nkeys := len(b.lines), len(b.keys)
	if c.Strict && len(b.rejects) > 0 {
		endLine = int(b.rejects[0].line)
		for nkeys > 0 && int(b.keyLine[nkeys-1]) > endLine {
			nkeys--
		}
	}
	li := 0
	for ki := 0; ki < nkeys || li < endLine; {
		k1 := min(ki+groupSize, nkeys)
		if f.x.timed && ki < nkeys {
			// Keys in flight answer InFlight whatever their time: commit
			// before the event time moves half a window past them.
			if f.eventCommitDue(b.times[ki]) {
				b.marks = append(b.marks, mark{li: li, kind: markCommit, bar: f.barrier()})
			}
			k1 = f.cutAtEventLimit(b, ki, k1)
		}
		next := endLine // the group takes the lines up to its last key, or to the end
		if k1 < nkeys {
			next = int(b.keyLine[k1-1]) + 1
		}
		if k1 > ki {
			if err := f.observeGroup(b, ki, k1); err != nil {
				err = fmt.Errorf("%s:%d: %w", displayName(c.Inputs[b.file]), b.firstLine+int64(b.keyLine[ki]), err)
				b.marks = append(b.marks, mark{li: li, kind: markFail, err: err})
				return true
			}
		}
		f.sinceCmt += next - li
		li, ki = next, k1
		if f.sinceCmt >= c.CommitEvery || time.Since(f.lastCmt) >= c.CommitInterval {
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
func (f *Filter) write(wq <-chan work, free chan<- *batch) error {
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
			if errors.Is(w.err, ErrInterrupted) && cerr != nil {
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
func (f *Filter) writeBatch(b *batch) (end bool, err error) {
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
			r := b.rejects[ri].r
			if err := f.writeReject(b, li, r); err != nil {
				return true, err
			}
			ri++
			j.Counts.Rejects++
			f.rejectWhy[rejectKey{r.code, r.field}]++
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
	if b.endFile {
		f.held = b.held
	}
	if b.endFile && b.file < len(j.Inputs)-1 {
		// On to the next input. The last input keeps its end as the
		// position, so that a run after it grew reads only what was
		// appended.
		m, err := f.markInput(b.file, j.Offset)
		if err != nil {
			return true, err
		}
		if len(j.Read) == b.file {
			j.Read = append(j.Read, m)
		} else {
			j.Read = nil // a checkpoint from before the marks: none
		}
		j.File, j.Offset, j.Line = b.file+1, 0, 1
	}
	return false, nil
}

// advance moves the job's position past the first n lines of b.
func (f *Filter) advance(b *batch, n int) {
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

func (f *Filter) publish() {
	cn := &f.job.Counts
	f.pub.events.Store(cn.Events - f.run0.Events)
	f.pub.distinct.Store(cn.Distinct - f.run0.Distinct)
	f.pub.dups.Store(cn.Duplicates - f.run0.Duplicates)
	f.pub.rejects.Store(cn.Rejects - f.run0.Rejects)
	f.pub.bytes.Store(cn.Bytes - f.run0.Bytes)
}

// strictStop commits the position before line li of b, with the keys
// before barrier bar, and reports the rejected line.
func (f *Filter) strictStop(b *batch, li int, bar dedup.Barrier) error {
	f.advance(b, li)
	cerr := f.commitSync(bar)
	var r reject
	for _, ra := range b.rejects {
		if int(ra.line) == li {
			r = ra.r
		}
	}
	err := fmt.Errorf("--strict: %s:%d: %s", displayName(f.cfg.Inputs[b.file]), b.firstLine+int64(li), r.describe(f.x))
	return errors.Join(rejected(err), cerr)
}
