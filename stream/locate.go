package stream

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// A log rotated since the last run is no longer under its name: the
// committed position is in the file now called app.log.1 (logrotate's
// create mode renames it; copytruncate copies it there and truncates
// app.log in place), and what it got after the last run is read only if
// that file is an input. So a job over a rotated log lists the rotated
// file first, --in app.log.1 --in app.log, and locate finds the position
// in whichever input holds it now.

// positionFileErr tells why the open file fl (fi) is not the file the
// committed position p was taken in, nil when it is: the same inode, at
// least p.Offset bytes, and the same bytes before the offset (inputSum).
// With copyOK, a file under another name than the position's may be a copy
// (copytruncate's): then its bytes alone identify it, when there are any
// before the offset. The device number is not compared: it may change when
// the system restarts.
func positionFileErr(fl *os.File, fi os.FileInfo, p *Checkpoint, copyOK bool) error {
	if fi == nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("is no longer a regular file, and the committed position is at its byte %d", p.Offset)
	}
	if _, ino, ok := fileID(fi); ok && p.Ino != 0 && ino != p.Ino && (!copyOK || p.Offset == 0) {
		return fmt.Errorf("is another file (inode %d) than the one the committed position, byte %d, is in (inode %d)", ino, p.Offset, p.Ino)
	}
	if fi.Size() < p.Offset {
		return fmt.Errorf("holds %d bytes, fewer than the committed position, byte %d", fi.Size(), p.Offset)
	}
	if p.Sum != "" {
		sum, err := inputSum(fl, p.Offset)
		if err != nil {
			return err
		}
		if sum != p.Sum {
			return fmt.Errorf("has other bytes before the committed position, byte %d, than when it was committed", p.Offset)
		}
	}
	return nil
}

// positionFile tells whether the input name is the file of the committed
// position p: mismatch says why not (positionFileErr), err that it could
// not be opened or read.
func positionFile(name string, p *Checkpoint) (mismatch, err error) {
	fl, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("open input: %w", err)
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat input: %w", err)
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, err
	}
	if err := positionFileErr(fl, fi, p, abs != p.Inputs[p.File]); err != nil {
		return fmt.Errorf("input %s %w", name, err), nil
	}
	return nil, nil
}

// rotationFix is the way out named when the input name, one of inputs,
// is not the file of the committed position and no input is.
func rotationFix(name string, inputs []string) string {
	fromStart := fmt.Sprintf("--from-start reads %s from its start (the keys committed stay remembered, and the outputs are kept and appended to)", name)
	if len(inputs) > 1 {
		return fmt.Sprintf("it was rotated, truncated or rewritten since, and no input is the file of the position (a rotated file is found by its inode, a copy by its bytes). "+
			"If it was rotated more than once since the last run, give the older rotated files first too (e.g. --in %s.2); otherwise %s", name, fromStart)
	}
	return fmt.Sprintf("it was rotated, truncated or rewritten since. If it was rotated (renamed, or copied and truncated), give the rotated file first, e.g. --in %s.1 --in %s: "+
		"the run finds the committed position in it by its inode (or, copied, by its bytes) and reads its tail, then %s from its start. Otherwise %s",
		name, name, name, fromStart)
}

// locate makes sure a resumed run starts in the file that holds the
// committed position, and finds that file among the inputs when the
// input under its name is another one now (rotated), or when this run
// lists other inputs than the last job with the same outputs (the rotated
// file added in front). The inputs before the file found are taken as
// read and those after it are read from their start, so the inputs
// before it must be files the last job read (checkpoint.Read), and none
// after it may be one. (With a checkpoint from before Read was recorded:
// it must be the first input, or, in the same job, come before the
// position's input, and with other inputs none after it may have the name
// of one the last job read.)
func (f *Filter) locate() error {
	j, p := &f.job, f.prev
	if f.resumed {
		if j.File >= len(j.Inputs) || (j.Ino == 0 && j.Sum == "") {
			return nil // complete, or a position without an identity
		}
		mismatch, err := positionFile(f.cfg.Inputs[j.File], p)
		if err != nil {
			return err // cannot be opened
		}
		if mismatch == nil {
			f.warnGrown(j.File)
			return nil
		}
		k := f.findPosition()
		if k < 0 || !f.readBefore(k, true) || !f.unreadAfter(k, true) {
			return fmt.Errorf("%w: %s", mismatch, rotationFix(f.cfg.Inputs[j.File], f.cfg.Inputs))
		}
		f.relocate(k)
		return nil
	}
	if !f.relocatable {
		return nil
	}
	k := f.findPosition()
	switch {
	case k < 0:
		return nil
	case !f.readBefore(k, false):
		return usagef("input %s holds the committed position of the state's last job (byte %d of %s), but it comes after %s, which would be taken as read: give it first, or use --from-start to read every input from its start",
			f.cfg.Inputs[k], p.Offset, displayName(p.Inputs[p.File]), f.cfg.Inputs[k-1])
	case !f.unreadAfter(k, false):
		return nil // an input after it was read: not a resume (openOutput decides)
	}
	f.relocate(k)
	return nil
}

// readBefore reports whether the inputs before k are files the last job
// read (see locate); sameJob: this run's inputs are the last job's.
func (f *Filter) readBefore(k int, sameJob bool) bool {
	p := f.prev
	if len(p.Read) != p.File {
		return k == 0 || (sameJob && k < p.File)
	}
	for _, in := range f.cfg.Inputs[:k] {
		if i, _ := readMark(in, p.Read); i < 0 {
			return false
		}
	}
	return true
}

// unreadAfter reports whether none of the inputs after k is a file the
// last job read (see locate); sameJob: this run's inputs are the last
// job's.
func (f *Filter) unreadAfter(k int, sameJob bool) bool {
	p := f.prev
	if len(p.Read) != p.File {
		if sameJob {
			return true // a rotation shifts the names: trust them
		}
		for _, in := range f.job.Inputs[k+1:] {
			if slices.Contains(p.Inputs[:p.File], in) {
				return false
			}
		}
		return true
	}
	for _, in := range f.cfg.Inputs[k+1:] {
		if i, _ := readMark(in, p.Read); i >= 0 {
			return false
		}
	}
	return true
}

// readMark returns the index of the mark in marks that the input name is
// (the same inode, at least as long, the same bytes before the mark's
// offset) and how many bytes it got since; -1 if none. A mark of a file
// read empty identifies none: its inode may be another file's by now.
func readMark(name string, marks []FileMark) (int, int64) {
	fl, err := os.Open(name)
	if err != nil {
		return -1, 0
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return -1, 0
	}
	_, ino, ok := fileID(fi)
	for i, m := range marks {
		if m.Ino == 0 || m.Offset == 0 || (ok && ino != m.Ino) || fi.Size() < m.Offset {
			continue
		}
		if sum, err := inputSum(fl, m.Offset); err == nil && sum == m.Sum {
			return i, fi.Size() - m.Offset
		}
	}
	return -1, 0
}

// warnGrown warns of the inputs before n, taken as read, that grew after
// the last job read them to their end (a writer that had not reopened its
// rotated log yet): what they got since is not read. Resuming the same
// job, their marks move to their end, so that the warning is given once.
func (f *Filter) warnGrown(n int) {
	p := f.prev
	if len(p.Read) != p.File {
		return
	}
	for i, in := range f.cfg.Inputs[:n] {
		if k, grown := readMark(in, p.Read); k >= 0 && grown > 0 {
			fmt.Fprintf(f.cfg.Stderr, "dedup: warning: %s got %d bytes after a run read it to its end: they are not read (the writer should reopen its log when it is rotated)\n", in, grown)
			if m, ok := markPath(in); ok && i < len(f.job.Read) {
				f.job.Read[i] = m
			}
		}
	}
}

// findPosition returns the index of the first input that is the file of
// the committed position, -1 if none is. An input that cannot be opened is
// not it (and fails the run when it is opened).
func (f *Filter) findPosition() int {
	for i, in := range f.cfg.Inputs {
		if mismatch, err := positionFile(in, f.prev); err == nil && mismatch == nil {
			return i
		}
	}
	return -1
}

// relocate resumes the last job's position in input k, the inputs listed
// in this run, and says so on stderr.
func (f *Filter) relocate(k int) {
	j, p := &f.job, f.prev
	f.warnGrown(k)
	inputs := j.Inputs
	*j = *p
	j.Inputs, j.File = inputs, k
	// The inputs before k, taken as read, as they are now.
	j.Read = nil
	for _, in := range f.cfg.Inputs[:k] {
		m, ok := markPath(in)
		if !ok {
			j.Read = nil
			break
		}
		j.Read = append(j.Read, m)
	}
	f.resumed = true
	fmt.Fprintf(f.cfg.Stderr, "dedup: note: the committed position, byte %d of %s, is in %s now (rotated): resuming there\n",
		p.Offset, displayName(p.Inputs[p.File]), f.cfg.Inputs[k])
}

// markPath is the FileMark of the input name at its end; false if it is
// not a regular file that can be read.
func markPath(name string) (FileMark, bool) {
	fl, err := os.Open(name)
	if err != nil {
		return FileMark{}, false
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return FileMark{}, false
	}
	m, err := markAt(fl, fi, fi.Size())
	return m, err == nil
}

// markInput is the FileMark of input i of the run read to byte off, a
// zero mark for a stream.
func (f *Filter) markInput(i int, off int64) (FileMark, error) {
	fl := f.inFiles[i]
	if fl == nil {
		return FileMark{Offset: off}, nil
	}
	fi, err := fl.Stat()
	if err != nil {
		return FileMark{}, fmt.Errorf("stat input %s: %w", fl.Name(), err)
	}
	m, err := markAt(fl, fi, off)
	if err != nil {
		return FileMark{}, fmt.Errorf("input %s: %w", fl.Name(), err)
	}
	return m, nil
}

// markAt is the FileMark of the file fl (fi) read to byte off.
func markAt(fl *os.File, fi os.FileInfo, off int64) (FileMark, error) {
	_, ino, _ := fileID(fi)
	sum, err := inputSum(fl, off)
	return FileMark{Ino: ino, Offset: off, Sum: sum}, err
}
