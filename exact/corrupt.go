package exact

// Damage at rest: Pebble's corruption reports turned into errors of the
// corruption class that name the damaged file.

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// corruptionListener is Pebble's DataCorruption event: it is raised on the
// goroutine whose read met a damaged block (a checksum mismatch), before
// Pebble returns the error to that read. Pebble's default handler calls
// Logger.Fatalf; this one only logs, so that the read returns the error
// (see corruption) and the Store stays usable for what is not damaged.
func corruptionListener(lg *fatalLogger) func(pebble.DataCorruptionInfo) {
	return func(info pebble.DataCorruptionInfo) {
		lg.Errorf("exact: corrupt table %s: %v", info.Path, info.Details)
	}
}

// corruption returns err marked with ErrCorrupt, naming the damaged file,
// when Pebble reports it as corruption (pebble.IsCorruptionError); any
// other err unchanged.
func corruption(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) || errors.Is(err, ErrCorrupt) {
		return err
	}
	ce := &corruptError{err: err}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		ce.path, ce.detail = info.Path, info.Details
	}
	return ce
}

// corruptError is a damaged file Pebble met while reading.
type corruptError struct {
	path   string // "" when Pebble did not say
	detail error  // Pebble's description of the damage, nil if none
	err    error
}

func (e *corruptError) Error() string {
	detail := e.err
	if e.detail != nil {
		detail = e.detail
	}
	if e.path == "" {
		return fmt.Sprintf("%v: %v", ErrCorrupt, detail)
	}
	return fmt.Sprintf("%v: file %s: %v", ErrCorrupt, e.path, detail)
}

func (e *corruptError) Unwrap() []error { return []error{ErrCorrupt, e.err} }
