package exact

import (
	"fmt"

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
// default implementation exits the process. fatalLogger panics with a
// fatalPanic instead, which the Store call that triggered it recovers into
// an error (see Store.recovered).
type fatalLogger struct {
	pebble.Logger
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
	panic(fatalPanic{err})
}

// asFatal returns the error carried by a recovered fatalPanic; any other
// panic value is re-raised.
func asFatal(r any) error {
	fp, ok := r.(fatalPanic)
	if !ok {
		panic(r)
	}
	return fp.err
}
