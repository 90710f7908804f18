package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// bufSize is the size of the output buffers.
const bufSize = 1 << 20

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

func (f *filterRun) flushAll() error {
	for _, o := range []*output{f.out, f.dups, f.rejects} {
		if err := o.flush(); err != nil {
			return err
		}
	}
	return nil
}
