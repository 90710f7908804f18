package stream

import (
	"errors"
	"fmt"
)

var (
	// ErrInterrupted ends a run stopped by [Config.Interrupt], after a
	// commit of everything read: run the same job again to resume it.
	ErrInterrupted = errors.New("interrupted")
	// ErrRejected marks rejected lines that fail a run: the first one
	// under [Config.Strict], or most of a run's lines ([Filter.Verdict]);
	// and a line without a key ([Keyer.Key]).
	ErrRejected = errors.New("stream: rejected lines")
	// ErrUsage marks a bad [Config] ([Config.Validate]), and a job that
	// contradicts the state's last one (its outputs, its inputs' order):
	// what dedup filter reports as bad usage, with exit status 2.
	ErrUsage = errors.New("stream: bad usage")
	// ErrForeignCheckpoint reports an engine checkpoint that a stream
	// filter did not write ([DecodeCheckpoint]).
	ErrForeignCheckpoint = errors.New("checkpoint not written by dedup filter")
)

// marked is an error that reads as err and also matches mark.
type marked struct{ err, mark error }

func (m marked) Error() string        { return m.err.Error() }
func (m marked) Unwrap() error        { return m.err }
func (m marked) Is(target error) bool { return target == m.mark }

// rejected marks err with ErrRejected.
func rejected(err error) error { return marked{err, ErrRejected} }

// usagef is a formatted error marked with ErrUsage.
func usagef(format string, args ...any) error {
	return marked{fmt.Errorf(format, args...), ErrUsage}
}
