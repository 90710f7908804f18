package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/streamdedup/dedup"
)

// lineRef locates one line in a batch's buffer: buf[start:end] is the
// line without its newline, and next is the offset, relative to the
// batch's first byte, where the following line starts.
type lineRef struct {
	start, end int32
	next       int64
}

// rejectAt is a rejected line of a batch.
type rejectAt struct {
	line int32
	r    reject
}

// batch is a run of whole lines of one input, with their keys. The reader
// fills it; the filter loop consumes it and hands it back for reuse.
type batch struct {
	file      int   // index of the input
	off       int64 // input offset of buf[0]
	firstLine int64 // line number of lines[0]
	buf       []byte
	lines     []lineRef
	keys      [][]byte // keys of the accepted lines, in order
	keyLine   []int32  // keyLine[k] is the line of keys[k]
	times     []int64  // with --time-field: times[k] is the time of keys[k] (Unix ns)
	rejects   []rejectAt
	arena     []byte // composite keys
	endFile   bool   // the input is exhausted after this batch
	held      int    // with endFile: bytes of a last line without newline left unread (source.holdTail)
	err       error  // read error after the lines of this batch

	// Filled by the engine goroutine (filterRun.observe) for the writer.
	verdicts []dedup.Verdict // verdicts[k] is the verdict of keys[k]
	marks    []mark          // commit points and stops, in line order

	ready chan struct{} // with reader workers: the lines are cut
}

func (b *batch) reset() {
	b.buf = b.buf[:0]
	b.lines = b.lines[:0]
	clear(b.keys) // drop references into old buffers
	b.keys = b.keys[:0]
	b.keyLine = b.keyLine[:0]
	b.times = b.times[:0]
	b.rejects = b.rejects[:0]
	b.arena = b.arena[:0]
	b.endFile, b.err, b.held = false, nil, 0
	b.verdicts = b.verdicts[:0]
	b.marks = b.marks[:0]
}

// source is one input to read.
type source struct {
	name string // as given; "-" is stdin
	r    io.Reader
	// start position (resume)
	off  int64
	line int64
	// holdTail leaves a last line without a newline unread at the end of
	// the input: a file still being written, whose position is committed
	// so that a later run reads that line once it is whole. Elsewhere the
	// end of the input ends the line.
	holdTail bool
}

// reader cuts inputs into batches of whole lines and extracts their keys.
// It runs in its own goroutine (run), so that parsing overlaps with the
// engine and the writes. With workers > 1, the lines of each batch are cut
// and their keys extracted by that many goroutines, one batch each, and the
// batches still reach full in input order: key extraction, the heaviest
// part, then spreads over the cores the engine and the writer leave idle.
type reader struct {
	srcs    []source
	first   int // index of srcs[0] among all inputs
	x       *Keyer
	chunk   int // bytes read per batch
	workers int // goroutines extracting keys; 0 or 1: the reader itself
	full    chan<- *batch
	free    <-chan *batch
	done    <-chan struct{}
	carry   []byte // partial line carried to the next batch

	jobs  chan *batch // batches to cut, for the workers
	order chan *batch // every batch, in input order, for forward
}

// run reads every source and closes full at the end. A read error is
// delivered in the last batch.
func (rd *reader) run() {
	if rd.workers > 1 {
		rd.jobs = make(chan *batch, 16)
		rd.order = make(chan *batch, 16)
		for range rd.workers {
			go rd.work(rd.x.Clone())
		}
		go rd.forward()
		defer close(rd.order)
		defer close(rd.jobs)
	} else {
		defer close(rd.full)
	}
	for i := range rd.srcs {
		if !rd.readSource(rd.first+i, &rd.srcs[i]) {
			return
		}
	}
}

// work cuts the lines of the batches it receives, with its own extractor.
func (rd *reader) work(x *Keyer) {
	for b := range rd.jobs {
		cutLines(b, x)
		b.ready <- struct{}{}
	}
}

// forward hands the batches on to full in input order, each once cut, and
// closes full after the last.
func (rd *reader) forward() {
	defer close(rd.full)
	for b := range rd.order {
		<-b.ready
		select {
		case rd.full <- b:
		case <-rd.done:
		}
	}
}

// emit delivers b, whose lines are to be cut if cut; false when the run is
// abandoned.
func (rd *reader) emit(b *batch, cut bool) bool {
	if rd.workers <= 1 {
		if cut {
			cutLines(b, rd.x)
		}
		return rd.put(b)
	}
	if b.ready == nil {
		b.ready = make(chan struct{}, 1)
	}
	if cut {
		rd.jobs <- b
	} else {
		b.ready <- struct{}{}
	}
	select {
	case rd.order <- b:
		return true
	case <-rd.done:
		return false
	}
}

// get waits for a free batch; false when the run is abandoned.
func (rd *reader) get() (*batch, bool) {
	select {
	case b := <-rd.free:
		b.reset()
		return b, true
	case <-rd.done:
		return nil, false
	}
}

func (rd *reader) put(b *batch) bool {
	select {
	case rd.full <- b:
		return true
	case <-rd.done:
		return false
	}
}

// readSource reads one input to its end; false when the run must stop.
func (rd *reader) readSource(file int, src *source) bool {
	off, lineNo := src.off, src.line
	rd.carry = rd.carry[:0]
	eof := false
	for {
		b, ok := rd.get()
		if !ok {
			return false
		}
		b.file, b.off, b.firstLine = file, off, lineNo
		b.buf = append(b.buf[:0], rd.carry...)
		rd.carry = rd.carry[:0]
		want := max(rd.chunk, 2*len(b.buf))
		if cap(b.buf) < want {
			nb := make([]byte, len(b.buf), want)
			copy(nb, b.buf)
			b.buf = nb
		}
		// Read until the buffer holds a newline, is full, or the input ends.
		var rerr error
		for !eof {
			n, err := src.r.Read(b.buf[len(b.buf):cap(b.buf)])
			scanFrom := len(b.buf)
			b.buf = b.buf[:len(b.buf)+n]
			if err == io.EOF {
				eof = true
			} else if err != nil {
				rerr = fmt.Errorf("read %s: %w", displayName(src.name), err)
				break
			}
			if bytes.IndexByte(b.buf[scanFrom:], '\n') >= 0 || len(b.buf) == cap(b.buf) {
				break
			}
		}
		cut := bytes.LastIndexByte(b.buf, '\n') + 1 // bytes of whole lines
		switch {
		case rerr != nil:
			// The lines read whole are done; the rest is read again by
			// the next run, from the position committed before it.
		case eof && src.holdTail:
			b.held = len(b.buf) - cut // being written, maybe: left for a later run
		case eof:
			cut = len(b.buf) // at the end of a stream, a last line without newline is whole
		case cut == 0 && len(b.buf) > rd.x.maxLine:
			// No newline within --max-line bytes: reject the line and
			// skip to its end.
			skipped, err := rd.skipLine(src, b)
			if err != nil {
				rerr = err
			}
			if skipped.eof {
				eof = true
				if src.holdTail && rerr == nil {
					// An over-long last line still without newline: not
					// consumed either.
					b.buf, b.lines, b.rejects = b.buf[:0], b.lines[:0], b.rejects[:0]
					b.held, b.endFile = int(min(skipped.n, 1<<40)), true
					return rd.emit(b, false)
				}
			}
			off += skipped.n
			lineNo++
			b.endFile = eof && rerr == nil
			b.err = rerr
			if !rd.emit(b, false) || rerr != nil {
				return false
			}
			if eof {
				return true
			}
			continue
		}
		rd.carry = append(rd.carry, b.buf[cut:]...)
		b.buf = b.buf[:cut]
		off += int64(cut)
		lineNo += int64(bytes.Count(b.buf, newline))
		if cut > 0 && b.buf[cut-1] != '\n' {
			lineNo++ // a last line without newline
		}
		b.endFile = eof && rerr == nil
		b.err = rerr
		if !rd.emit(b, true) || rerr != nil {
			return false
		}
		if eof {
			return true
		}
	}
}

type skipResult struct {
	n   int64 // bytes of the line, newline included
	eof bool
}

// skipLine turns b, which holds the start of an over-long line, into a
// batch of that one rejected line (its first bytes kept for the rejects
// record), reading and discarding the rest of the line.
func (rd *reader) skipLine(src *source, b *batch) (skipResult, error) {
	n := int64(len(b.buf))
	keep := min(len(b.buf), rejectShow)
	var scratch [64 << 10]byte
	res := skipResult{}
	for {
		m, err := src.r.Read(scratch[:])
		if i := bytes.IndexByte(scratch[:m], '\n'); i >= 0 {
			n += int64(i + 1)
			// The bytes after the newline start the next line.
			rd.carry = append(rd.carry[:0], scratch[i+1:m]...)
			break
		}
		n += int64(m)
		if err == io.EOF {
			res.eof = true
			break
		}
		if err != nil {
			res.n = n
			return res, fmt.Errorf("read %s: %w", displayName(src.name), err)
		}
	}
	res.n = n
	b.buf = b.buf[:keep]
	b.lines = append(b.lines, lineRef{start: 0, end: int32(keep), next: n})
	size := n
	if !res.eof {
		size-- // the newline
	}
	b.rejects = append(b.rejects, rejectAt{line: 0, r: reject{code: rejLineTooLong, size: int(min(size, 1<<62))}})
	return res, nil
}

var newline = []byte{'\n'}

// cutLines splits b.buf into lines and extracts their keys with x.
func cutLines(b *batch, x *Keyer) {
	buf := b.buf
	for start := 0; start < len(buf); {
		end := bytes.IndexByte(buf[start:], '\n')
		next := 0
		if end < 0 {
			end, next = len(buf), len(buf)
		} else {
			end += start
			next = end + 1
		}
		li := int32(len(b.lines))
		b.lines = append(b.lines, lineRef{start: int32(start), end: int32(end), next: int64(next)})
		var key []byte
		var r reject
		if end-start > x.maxLine {
			r = reject{code: rejLineTooLong, size: end - start}
		} else {
			key, b.arena, r = x.extract(buf[start:end], b.arena)
		}
		var at int64
		if r.code == rejNone && x.timed {
			at, r = x.eventTime(buf[start:end])
		}
		if r.code != rejNone {
			b.rejects = append(b.rejects, rejectAt{line: li, r: r})
		} else {
			b.keys = append(b.keys, key)
			b.keyLine = append(b.keyLine, li)
			if x.timed {
				b.times = append(b.times, at)
			}
		}
		start = next
	}
}

// rejectShow is how many bytes of a rejected line its record shows.
const rejectShow = 512

func displayName(name string) string {
	if name == "-" {
		return "<stdin>"
	}
	return name
}

// openInput opens a named input; "-" is stdin.
func openInput(name string, stdin io.Reader) (io.Reader, func() error, os.FileInfo, error) {
	if name == "-" {
		return stdin, func() error { return nil }, nil, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, nil, errors.Join(err, f.Close())
	}
	if fi.IsDir() {
		// Opened, a directory fails only when read, after the outputs
		// were created.
		return nil, nil, nil, errors.Join(fmt.Errorf("%s is a directory", name), f.Close())
	}
	return f, f.Close, fi, nil
}

// openSources opens the inputs still to read, at the job's position, and
// sums their sizes (-1 if unknown) for the progress bar. Resuming, the
// input at the position must be the file the position was committed in
// (checkIdentity).
func (f *Filter) openSources() ([]source, error) {
	c := f.cfg
	j := &f.job
	var srcs []source
	f.totalSize = 0
	f.inFiles = make([]*os.File, len(c.Inputs))
	for i := j.File; i < len(c.Inputs); i++ {
		r, closeFn, fi, err := openInput(c.Inputs[i], f.cfg.Stdin)
		if err != nil {
			return nil, fmt.Errorf("open input: %w", err)
		}
		f.closers = append(f.closers, closeFn)
		src := source{name: c.Inputs[i], r: r, line: 1}
		regular := fi != nil && fi.Mode().IsRegular()
		if !regular {
			f.totalSize = -1
		} else {
			f.inFiles[i] = r.(*os.File)
			if f.totalSize >= 0 {
				f.totalSize += fi.Size()
			}
		}
		// The last input of a job with a state keeps its end as the
		// position, to read what is appended later: a line still being
		// written there waits for that.
		src.holdTail = f.durable && regular && i == len(c.Inputs)-1
		if i == j.File && f.resumed {
			if err := f.checkIdentity(c.Inputs[i], fi); err != nil {
				return nil, err
			}
			if _, err := r.(io.Seeker).Seek(j.Offset, io.SeekStart); err != nil {
				return nil, fmt.Errorf("seek input %s: %w", c.Inputs[i], err)
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

// checkIdentity checks that the input name (fi, open in f.inFiles) is the
// file the committed position was taken in (positionFileErr): the same
// inode, at least as long, and the same bytes before the offset; under
// another name than the position's (found by locate), a copy of it with
// the same bytes. Another file is an error naming the way out.
func (f *Filter) checkIdentity(name string, fi os.FileInfo) error {
	j, p := &f.job, f.prev
	copyOK := p != nil && p.File < len(p.Inputs) && j.Inputs[j.File] != p.Inputs[p.File]
	if err := positionFileErr(f.inFiles[j.File], fi, j, copyOK); err != nil {
		return fmt.Errorf("input %s %w: %s", name, err, rotationFix(name, f.cfg.Inputs))
	}
	return nil
}

// recordIdentity records in the job the identity of the input at its
// position (see checkpoint.Ino), for the commit about to be made.
func (f *Filter) recordIdentity() error {
	j := &f.job
	j.Dev, j.Ino, j.Sum = 0, 0, ""
	if j.File >= len(f.inFiles) || f.inFiles[j.File] == nil {
		return nil
	}
	fl := f.inFiles[j.File]
	fi, err := fl.Stat()
	if err != nil {
		return fmt.Errorf("stat input %s: %w", fl.Name(), err)
	}
	if fi.Size() < j.Offset {
		// The bytes read are gone: the position cannot be identified, and
		// this run commits nothing more. The next one resumes from the last
		// commit, in the rotated copy if it is given first (locate).
		return fmt.Errorf("input %s was truncated while it was read (to %d bytes, below the %d read): rotated by copytruncate? What was read since the last commit is not committed; run again, with the rotated copy given first (--in %s.1 --in %s)",
			fl.Name(), fi.Size(), j.Offset, fl.Name(), fl.Name())
	}
	j.Dev, j.Ino, _ = fileID(fi)
	if j.Sum, err = inputSum(fl, j.Offset); err != nil {
		return fmt.Errorf("input %s: %w", fl.Name(), err)
	}
	return nil
}
