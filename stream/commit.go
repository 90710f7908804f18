package stream

import (
	"errors"
	"fmt"
	"time"

	"github.com/streamdedup/dedup"
)

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
func (f *Filter) commit(bar dedup.Barrier) error {
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
	if err := f.recordIdentity(); err != nil {
		return err
	}
	cp := j.encode()
	if err := f.waitCommit(); err != nil {
		return err
	}
	done := make(chan error, 1)
	f.cmtDone = done
	go func() {
		start := time.Now()
		err := f.syncOutputs()
		if err == nil {
			// The engine's error names the commit already.
			err = f.eng.CommitThrough(bar, cp)
		}
		if err == nil && f.cfg.OnCommit != nil {
			f.cfg.OnCommit(time.Since(start))
		}
		done <- err
	}()
	return nil
}

// waitCommit waits for the commit running in the background, if any.
func (f *Filter) waitCommit() error {
	if f.cmtDone == nil {
		return nil
	}
	err := <-f.cmtDone
	f.cmtDone = nil
	return err
}

// commitSync commits and waits until it is durable.
func (f *Filter) commitSync(bar dedup.Barrier) error {
	return errors.Join(f.commit(bar), f.waitCommit())
}

// syncOutputs fsyncs the outputs of a state-keeping run.
func (f *Filter) syncOutputs() error {
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
