package exact

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// quietLogger discards Pebble's messages.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(string, ...any) {}

// fatalPanic is the panic value of fatalLogger.Fatalf.
type fatalPanic struct{ err error }

// fatalError is a fatal Pebble message, wrapping the first error argument.
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return "exact: pebble fatal: " + e.msg }
func (e *fatalError) Unwrap() error { return e.cause }

// fatalLogger forwards to Logger, except Fatalf: Pebble calls it when it
// cannot continue (a failed WAL or MANIFEST write, for instance) and the
// default implementation exits the process. Pebble's own stance is that
// the process must die; an embedded dedup engine must not take its host
// down with it, and nothing it committed needs the process to die (every
// commit is in the fsynced WAL before it returns). So fatalLogger:
//   - on a goroutine running a Store call, panics with a fatalPanic, which
//     that call recovers into an error (see Store.recovered);
//   - on one of Pebble's background goroutines (flush, compaction), where
//     nothing could recover a panic, records the error, which breaks the
//     Store (every later call returns ErrBroken wrapping it), and ends that
//     goroutine with runtime.Goexit. Its deferred calls run, so it releases
//     Pebble's mutexes; the flush or compaction it was running never
//     finishes, so Pebble cannot close cleanly: Close gives up after
//     fatalCloseTimeout, an Open waiting for that flush returns the error
//     (see openPebble), and the directory is released when the process
//     exits. The state on disk is what the last synced WAL and MANIFEST
//     say, as after a crash, and the next Open recovers it.
type fatalLogger struct {
	pebble.Logger
	// bg is the first failure of Pebble's background work (see
	// failBackground); fatal is closed when it is set.
	bg    atomic.Pointer[error]
	fatal chan struct{}
	// onFail, if set, is called once the first failure is recorded: the
	// store wakes the commits waiting for a flush.
	onFail atomic.Pointer[func()]
}

func newFatalLogger(l pebble.Logger) *fatalLogger {
	return &fatalLogger{Logger: l, fatal: make(chan struct{})}
}

func (l *fatalLogger) Fatalf(format string, args ...any) {
	err := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			err.cause = e
			break
		}
	}
	l.Logger.Errorf("%v", err)
	if onStoreCall() {
		panic(fatalPanic{err})
	}
	l.failBackground(err)
	runtime.Goexit()
}

// failBackground records a failure of Pebble's background work after which
// the store cannot go on: a fatal error, or a failed flush (Pebble retries
// a flush at once and for ever, and writes stall once the memtables it
// cannot flush fill up, so commits would hang instead of failing). The
// first failure wins; it breaks the Store.
func (l *fatalLogger) failBackground(err error) {
	if l.bg.CompareAndSwap(nil, &err) {
		close(l.fatal)
		if fn := l.onFail.Load(); fn != nil {
			(*fn)()
		}
	}
}

// background returns the failure recorded by failBackground, nil if none
// happened.
func (l *fatalLogger) background() error {
	if p := l.bg.Load(); p != nil {
		return *p
	}
	return nil
}

// onStoreCall reports whether the calling goroutine runs code of this
// package (a Store call, Open or Close) below Fatalf, which recovers a
// fatalPanic. It walks the stack; Fatalf is rare enough for that.
func onStoreCall() bool {
	self := selfPrefix
	var pcs [256]uintptr
	n := runtime.Callers(3, pcs[:]) // above Fatalf
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, self) {
			return true
		}
		if !more {
			return false
		}
	}
}

// selfPrefix is this package's prefix in function names
// ("github.com/streamdedup/dedup/exact."), read from a function of it so
// that it follows the module path.
var selfPrefix = func() string {
	name := runtime.FuncForPC(reflect.ValueOf(newFatalLogger).Pointer()).Name()
	return name[:strings.LastIndex(name, ".")+1]
}()

// asFatal returns the error carried by a recovered fatalPanic; any other
// panic value is re-raised.
func asFatal(r any) error {
	fp, ok := r.(fatalPanic)
	if !ok {
		panic(r)
	}
	return fp.err
}
