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

// fatalLogger forwards to Logger, except Fatalf: Pebble calls it when it
// cannot continue (a failed WAL or MANIFEST write, for instance) and the
// default implementation exits the process. fatalLogger panics with a
// fatalPanic instead, which the Store call that triggered it recovers into
// an error (see recoverFatal).
type fatalLogger struct {
	pebble.Logger
}

func (l *fatalLogger) Fatalf(format string, args ...any) {
	err := fmt.Errorf("exact: pebble fatal: "+format, args...)
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
