package dedup

import (
	"errors"

	"github.com/streamdedup/dedup/exact"
)

// Sentinel errors. Test with errors.Is; returned errors wrap them with
// context.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("dedup: engine closed")
	// ErrEmptyKey rejects an empty key (or a nil entry in a batch).
	ErrEmptyKey = errors.New("dedup: empty key")
	// ErrKeyTooLarge rejects a key longer than Options.MaxKeySize.
	ErrKeyTooLarge = errors.New("dedup: key too large")
	// ErrTooManyInFlight is returned by Observe when Options.MaxInFlight keys
	// are awaiting a Commit.
	ErrTooManyInFlight = errors.New("dedup: too many keys in flight, Commit first")
	// ErrNotInFlight is returned by Forget for a key that is not in flight.
	ErrNotInFlight = errors.New("dedup: key is not in flight")
	// ErrInvalidOptions wraps every option that Validate rejects.
	ErrInvalidOptions = errors.New("dedup: invalid options")
	// ErrIncompatible is returned by Open when the state directory was
	// created with options that the given ones contradict.
	ErrIncompatible = errors.New("dedup: options incompatible with the state directory")
	// ErrNotOurs is returned by Open for a state directory that holds
	// another program's files.
	ErrNotOurs = exact.ErrNotOurs
	// ErrCorrupt is the corruption class: persisted state that fails its
	// checks (a bad snapshot, unreadable metadata).
	ErrCorrupt = errors.New("dedup: corrupt state")
	// ErrSnapshot wraps a failure to write a filter snapshot (Snapshot, a
	// periodic one, or the last one of Close). The committed state is intact:
	// the next Open restores from an older snapshot and the commit log, or
	// rebuilds the filters, so a caller may treat it as a warning.
	ErrSnapshot = errors.New("dedup: snapshot")
	// ErrBatchLength is returned by ObserveBatch when out is shorter than
	// keys.
	ErrBatchLength = errors.New("dedup: out is shorter than keys")
)
