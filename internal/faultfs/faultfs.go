// Package faultfs builds the fault injectors of dedup's tests on Pebble's
// vfs/errorfs: an errorfs predicate (Writes, Reads, OnIndex, PathMatch,
// Randomly, And, Or, Not) chooses the operation, and faultfs says what
// happens there: a chosen error ([If]) or a machine crash ([Crash]). Wrap
// the injector with errorfs.Toggle to arm it only around the call under
// test.
package faultfs

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// If returns an injector that fails every operation pred selects with err.
// err is returned as is, so errors.Is matches it: errorfs.ErrInjected.If
// returns a copy of ErrInjected that errors.Is does not match against it.
func If(pred errorfs.Predicate, err error) errorfs.Injector {
	return &ifInjector{pred: pred, err: err}
}

type ifInjector struct {
	pred errorfs.Predicate
	err  error
}

func (in *ifInjector) String() string { return fmt.Sprintf("(%v %s)", in.err, in.pred) }

func (in *ifInjector) MaybeError(op errorfs.Op) error {
	if in.pred.Evaluate(op) {
		return in.err
	}
	return nil
}

// Crash is a machine that goes down at the write operation its predicate
// selects: there it takes a crash clone of the file system (what the disk
// holds after the crash) and fails that write and every later one with
// errorfs.ErrInjected. Reads pass. The predicate sees write operations
// only, so errorfs.OnIndex(k) selects the k-th write. Safe for concurrent
// use.
type Crash struct {
	mem  *vfs.MemFS
	cfg  vfs.CrashCloneCfg
	pred errorfs.Predicate

	mu      sync.Mutex
	crashed *vfs.MemFS
	op      errorfs.Op
}

// NewCrash returns a Crash of mem at the write pred selects, cloned with
// cfg.
func NewCrash(mem *vfs.MemFS, pred errorfs.Predicate, cfg vfs.CrashCloneCfg) *Crash {
	return &Crash{mem: mem, cfg: cfg, pred: pred}
}

// String implements errorfs.Injector.
func (c *Crash) String() string { return fmt.Sprintf("(Crash %s)", c.pred) }

// MaybeError implements errorfs.Injector.
func (c *Crash) MaybeError(op errorfs.Op) error {
	if !errorfs.Writes.Evaluate(op) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed != nil {
		return errorfs.ErrInjected // the machine is down
	}
	if c.pred.Evaluate(op) {
		c.crashed, c.op = c.mem.CrashClone(c.cfg), op
		return errorfs.ErrInjected
	}
	return nil
}

// Crashed returns the file system as the crash left it and the write that
// crashed, or nil if the machine has not crashed.
func (c *Crash) Crashed() (*vfs.MemFS, errorfs.Op) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed, c.op
}
