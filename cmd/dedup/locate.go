package main

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
func positionFileErr(fl *os.File, fi os.FileInfo, p *checkpoint, copyOK bool) error {
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
func positionFile(name string, p *checkpoint) (mismatch, err error) {
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
// read, those after it are read from their start, so it must be the
// first input, or, in the same job, come before the position's input (a
// rotation shifts names: app.log became app.log.1). With other inputs,
// none after it may be one the last job read before its position: it
// would be read again.
func (f *filterRun) locate() error {
	j, p := &f.job, f.prev
	if f.resumed {
		if j.File >= len(j.Inputs) || (j.Ino == 0 && j.Sum == "") {
			return nil // complete, or a position without an identity
		}
		mismatch, err := positionFile(f.cfg.inputs[j.File], p)
		if err != nil || mismatch == nil {
			return err // cannot be opened, or the same file
		}
		k := f.findPosition()
		if k < 0 || k >= p.File {
			return fmt.Errorf("%w: %s", mismatch, rotationFix(f.cfg.inputs[j.File], f.cfg.inputs))
		}
		f.relocate(k)
		return nil
	}
	if !f.relocatable {
		return nil
	}
	k := f.findPosition()
	if k < 0 {
		return nil
	}
	if k > 0 {
		return usagef("input %s holds the committed position of the state's last job (byte %d of %s), but it comes after %s, which would be taken as read: give it first, or use --from-start to read every input from its start",
			f.cfg.inputs[k], p.Offset, displayName(p.Inputs[p.File]), f.cfg.inputs[k-1])
	}
	for _, in := range j.Inputs[1:] {
		if slices.Contains(p.Inputs[:p.File], in) {
			return nil // read before: not a resume (openOutput decides)
		}
	}
	f.relocate(k)
	return nil
}

// findPosition returns the index of the first input that is the file of
// the committed position, -1 if none is. An input that cannot be opened is
// not it (and fails the run when it is opened).
func (f *filterRun) findPosition() int {
	for i, in := range f.cfg.inputs {
		if mismatch, err := positionFile(in, f.prev); err == nil && mismatch == nil {
			return i
		}
	}
	return -1
}

// relocate resumes the last job's position in input k, the inputs listed
// in this run, and says so on stderr.
func (f *filterRun) relocate(k int) {
	j, p := &f.job, f.prev
	inputs := j.Inputs
	*j = *p
	j.Inputs, j.File = inputs, k
	f.resumed = true
	fmt.Fprintf(f.env.stderr, "dedup: note: the committed position, byte %d of %s, is in %s now (rotated): resuming there\n",
		p.Offset, displayName(p.Inputs[p.File]), f.cfg.inputs[k])
}
