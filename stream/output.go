package stream

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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

// prevOut is what the state's last checkpoint says of an output file.
type prevOut struct {
	known bool  // the state holds a checkpoint of this command
	same  bool  // that checkpoint names this file in this role
	n     int64 // and its committed length
}

// prevOutput returns what the state's checkpoint says of the output file
// abs, get picking the role (out, dups or rejects) from the checkpoint.
func (f *Filter) prevOutput(abs string, get func(*Checkpoint) (string, int64)) prevOut {
	if f.prev == nil {
		return prevOut{}
	}
	p, n := get(f.prev)
	return prevOut{known: true, same: abs != "" && abs != "-" && p == abs, n: n}
}

// openOutput opens the output name of flag fl ("" none, "-" stdout).
// Resuming, it is cut to its committed length. Otherwise a file that
// holds something is not simply truncated when the state remembers keys:
// the events in it would not be written again. The state's own output
// (prev) is continued from its committed length when this run reads the
// same inputs, or reads its inputs from the start on --from-start; any
// other such file is refused unless --overwrite.
func (f *Filter) openOutput(fl, name string, committed int64, prev prevOut) (*output, error) {
	switch name {
	case "":
		return nil, nil
	case "-":
		o := &output{name: "<stdout>", w: bufio.NewWriterSize(f.cfg.Stdout, bufSize)}
		f.closers = append(f.closers, func() error { return o.flush() })
		return o, nil
	}
	c := f.cfg
	keep := f.resumed // keep committed bytes, truncate what follows
	if !f.resumed && !c.Overwrite {
		if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			sameInputs := f.prev != nil && slices.Equal(f.prev.Inputs, f.job.Inputs)
			switch {
			case prev.same && (sameInputs || c.FromStart):
				keep, committed = true, prev.n
			case prev.same:
				return nil, usagef("%s %s holds the output of the state's last job, which read %s; this run reads %s, and would start over, truncating it: the events in it are remembered by the state and would not be written again. "+
					"Give the same inputs in the same order to resume that job, --from-start to read these from their start and append to %s, or another %s (--overwrite truncates it)",
					fl, name, displayInputs(f.prev.Inputs), displayInputs(f.job.Inputs), name, fl)
			case prev.known:
				return nil, usagef("%s %s exists (%d bytes) and is not an output of the state's last job: truncating it could lose events the state remembers, which would not be written again. "+
					"Use a new %s, or --overwrite to truncate it", fl, name, fi.Size(), fl)
			}
		}
	}
	var fh *os.File
	var err error
	if keep {
		fh, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	} else {
		fh, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, fh.Close)
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	regular := fi.Mode().IsRegular()
	if keep && regular {
		if fi.Size() < committed {
			return nil, fmt.Errorf("%s holds %d bytes but %d were committed: it was changed since; use a new output or --overwrite",
				name, fi.Size(), committed)
		}
		// Do-then-mark: what lies past the committed length was written
		// by a run that crashed before committing it; its events are New
		// again and will be written again.
		if err := fh.Truncate(committed); err != nil {
			return nil, fmt.Errorf("truncate %s: %w", name, err)
		}
		if _, err := fh.Seek(committed, io.SeekStart); err != nil {
			return nil, fmt.Errorf("seek %s: %w", name, err)
		}
		if err := fh.Sync(); err != nil {
			return nil, fmt.Errorf("fsync %s: %w", name, err)
		}
	}
	o := &output{name: name, f: fh, w: bufio.NewWriterSize(fh, bufSize), sync: regular}
	if keep {
		o.n = committed
	}
	f.closers = append(f.closers, func() error { return o.flush() })
	return o, nil
}

// displayInputs lists inputs for a message.
func displayInputs(in []string) string {
	names := make([]string, len(in))
	for i, n := range in {
		names[i] = displayName(n)
	}
	return strings.Join(names, " ")
}

// writeLine writes line, which ends with its newline or gets one.
func (f *Filter) writeLine(o *output, line []byte) error {
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
func (f *Filter) rejectRecord(b *batch, li int, r reject) []byte {
	ln := b.lines[li]
	text := b.buf[ln.start:ln.end]
	cut := len(text) > rejectShow || r.code == rejLineTooLong
	if len(text) > rejectShow {
		text = text[:rejectShow]
	}
	rec := fmt.Appendf(nil, "%s:%d: %s\t", displayName(f.cfg.Inputs[b.file]), b.firstLine+int64(li), r.describe(f.x))
	if f.rejects == nil {
		// On the terminal: a binary line must not reach it raw.
		rec = appendEscaped(rec, text)
	} else {
		rec = append(rec, text...) // the line as it was, to be fixed and fed again
	}
	if cut {
		rec = append(rec, "..."...)
	}
	return append(rec, '\n')
}

// appendEscaped appends text to dst with what a terminal would act on
// escaped as Go does (\x1b, \x00, \r, \u0085, and \xff for a byte that is
// not UTF-8); printable text, backslashes included, is left as it is.
func appendEscaped(dst, text []byte) []byte {
	for len(text) > 0 {
		r, n := utf8.DecodeRune(text)
		switch {
		case r == utf8.RuneError && n == 1:
			dst = fmt.Appendf(dst, `\x%02x`, text[0])
		case r == ' ' || unicode.IsPrint(r):
			dst = append(dst, text[:n]...)
		default:
			q := strconv.QuoteRune(r) // '\x1b'
			dst = append(dst, q[1:len(q)-1]...)
		}
		text = text[n:]
	}
	return dst
}

// stderrRejects is how many reject records stderr shows when there is no
// --rejects file: a mistyped --key rejects every line, and a terminal
// flooded with them hides the verdict that says why. The rest are counted
// (rejectsHidden) and noted in one line at the end (noteHiddenRejects).
const stderrRejects = 10

// writeReject writes the reject record of line li of b to --rejects, or
// to stderr while fewer than stderrRejects were shown there.
func (f *Filter) writeReject(b *batch, li int, r reject) error {
	if f.rejects == nil {
		if f.rejectsShown >= stderrRejects {
			f.rejectsHidden++
			return nil
		}
		f.rejectsShown++
	}
	if _, err := f.rejectsW.Write(f.rejectRecord(b, li, r)); err != nil {
		return fmt.Errorf("write rejects: %w", err)
	}
	return nil
}

// noteHiddenRejects says on stderr how many reject records it did not
// show (stderrRejects).
func (f *Filter) noteHiddenRejects() {
	if f.rejectsHidden > 0 {
		fmt.Fprintf(f.cfg.Stderr, "... %d more rejected lines not shown; use --rejects FILE to keep them\n", f.rejectsHidden)
	}
}

func (f *Filter) flushAll() error {
	for _, o := range []*output{f.out, f.dups, f.rejects} {
		if err := o.flush(); err != nil {
			return err
		}
	}
	return nil
}
