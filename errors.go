package dedup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/internal/errclass"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// Sentinel errors. Test with errors.Is; returned errors wrap them with
// context.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("dedup: engine closed")
	// ErrNotOpen is returned by the methods of an Engine that [Open] did
	// not make (a zero Engine): open one with Open.
	ErrNotOpen = errors.New("dedup: engine not opened: make it with dedup.Open")
	// ErrEmptyKey rejects an empty key (or a nil entry in a batch).
	ErrEmptyKey = errors.New("dedup: empty key")
	// ErrKeyTooLarge rejects a key longer than Options.MaxKeySize.
	ErrKeyTooLarge = errors.New("dedup: key too large")
	// ErrTooManyInFlight is returned by Observe when Options.MaxInFlight keys
	// are in flight: awaiting a Commit or, under ExplicitDone, a Done.
	ErrTooManyInFlight = errors.New("dedup: too many keys in flight, Commit first")
	// ErrNotInFlight is returned by Forget, Done and DoneBatch for a key
	// that is not in flight.
	ErrNotInFlight = errors.New("dedup: key is not in flight")
	// ErrAlreadyDone is returned, under Options.ExplicitDone, by Forget and
	// Done for a key already Done: it goes into the next commit and can no
	// longer be forgotten.
	ErrAlreadyDone = errors.New("dedup: key is already done")
	// ErrNoExplicitDone is returned by Done and DoneBatch on an engine
	// opened without Options.ExplicitDone, whose commits take every key
	// observed New, processed or not.
	ErrNoExplicitDone = errors.New("dedup: Done needs Options.ExplicitDone")
	// ErrInvalidOptions wraps every option that Validate rejects.
	ErrInvalidOptions = errors.New("dedup: invalid options")
	// ErrIncompatible is returned by Open when the state directory was
	// created with options that the given ones contradict.
	ErrIncompatible = errors.New("dedup: options incompatible with the state directory")
	// ErrStateInUse is returned by Open for a state directory that another
	// engine holds open, in this process or another: its message names the
	// process when the system tells.
	ErrStateInUse = errors.New("dedup: state directory in use")
	// ErrNotOurs is returned by Open for a state directory that holds
	// another program's files.
	ErrNotOurs = exact.ErrNotOurs
	// ErrCorrupt is the corruption class: persisted state that fails its
	// checks (a bad snapshot, unreadable metadata). Every layer's
	// corruption matches it: filter.ErrCorrupt, exact.ErrCorrupt and
	// snapshot.ErrCorrupt wrap it.
	ErrCorrupt = errclass.ErrCorrupt
	// ErrLostCommits is returned by Open for a state whose store ends
	// before a commit that one of its snapshots covers: acknowledged
	// commits are gone (a commit log cut short or damaged). The error names
	// the files and the commits lost; nothing is changed. It matches
	// ErrCorrupt. Options.AcceptLostCommits opens such a state.
	ErrLostCommits = exact.ErrLostCommits
	// ErrNewerFormat is returned by Open for a state directory whose store
	// was written in a format newer than this build reads (the error names
	// the format and the directory); open it with the build that wrote it.
	ErrNewerFormat = exact.ErrNewerFormat
	// ErrBroken is wrapped by every call that reaches the state after a
	// write to it failed: a failed commit write leaves the store in an
	// unknown state. Close the engine and Open it again, which restores
	// what was committed; after a fatal error in Pebble's background work
	// the state directory is released only when the process exits.
	ErrBroken = exact.ErrBroken
	// ErrSnapshot wraps a failure to write a filter snapshot (Snapshot, a
	// periodic one, or the last one of Close). The committed state is intact:
	// the next Open restores from an older snapshot and the commit log
	// (probabilistic mode) or rebuilds the filters from the store (exact
	// mode), so a caller may treat it as a warning.
	ErrSnapshot = errors.New("dedup: snapshot")
	// ErrNotBackup is returned by [RestoreBackup] for a directory that
	// holds no backup: no [BackupManifest] (a copy of a state, such as
	// cp -a makes, is not a backup) and no valid lone snapshot. A backup
	// whose manifest is there but whose files fail it is damaged instead:
	// [ErrCorrupt].
	ErrNotBackup = errors.New("dedup: not a backup")
	// ErrBatchLength is returned by ObserveBatch when out is shorter than
	// keys.
	ErrBatchLength = errors.New("dedup: out is shorter than keys")
)

// prefix begins every error message of this package.
const prefix = "dedup: "

// wrap returns err with context, under the package prefix written once: an
// err made in this package, which carries the prefix already, is not
// prefixed a second time ("dedup: backup: snapshot: ...", never "dedup:
// backup: dedup: snapshot: ..."). errors.Is and errors.As see err.
func wrap(err error, format string, args ...any) error {
	return &wrapError{context: fmt.Sprintf(format, args...), err: err}
}

// wrapError is an error with the context of the operation that met it.
type wrapError struct {
	context string
	err     error
}

func (w *wrapError) Error() string {
	return prefix + w.context + ": " + strings.TrimPrefix(w.err.Error(), prefix)
}

func (w *wrapError) Unwrap() error { return w.err }

// stateOpenError is the error of Open when the exact store in dir (on
// fsys) did not open: ErrStateInUse, naming the holder, when another
// engine holds its lock, err wrapped otherwise. given is the Dir the
// caller gave.
func stateOpenError(err error, fsys vfs.FS, dir, given string) error {
	// fcntl's EAGAIN or EACCES from another process's lock, or Pebble's
	// own message for this process's; a permission problem creating the
	// LOCK file is an *fs.PathError and does not count.
	var pe *fs.PathError
	held := strings.Contains(err.Error(), "lock held by current process") ||
		!errors.As(err, &pe) && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES))
	if !held {
		return wrap(err, "open state %q", given)
	}
	if strings.Contains(err.Error(), "lock held by current process") {
		return fmt.Errorf("%w: %q is open in this process already (close that Engine first): %w", ErrStateInUse, given, err)
	}
	if fsys == vfs.Default || fsys == fsperm.FS(vfs.Default) {
		if pid := lockHolder(filepath.Join(dir, "LOCK")); pid > 0 {
			return fmt.Errorf("%w: %q is open in process %d (stop it, or give this one another Dir): %w", ErrStateInUse, given, pid, err)
		}
	}
	return fmt.Errorf("%w: %q is open in another process (stop it, or give this one another Dir): %w", ErrStateInUse, given, err)
}

// ErrPoolClosed is returned by [Pool.Submit] once [Pool.Close] has begun.
var ErrPoolClosed = errors.New("dedup: pool closed")

// ErrNoEventTime is returned by [Engine.ObserveAt] and
// [Engine.ObserveBatchAt] on an engine opened without
// [Options.EventTime], whose clock is Options.Now.
var ErrNoEventTime = errors.New("dedup: ObserveAt needs Options.EventTime")

// ErrEventTime rejects an event time before the Unix epoch or past the
// year 2262 (outside int64 nanoseconds).
var ErrEventTime = errors.New("dedup: event time out of range")

var (
	// ErrNeedsExact is returned by Begin, Complete and Release on an engine
	// in probabilistic mode, which keeps no store for results.
	ErrNeedsExact = errors.New("dedup: idempotency records need exact mode (Options.Probabilistic false)")
	// ErrLeaseLost is returned by Complete and Release when the key is no
	// longer in progress under the token: it was completed or released
	// already, its lease passed and another caller claimed it, or the key
	// left the window.
	ErrLeaseLost = errors.New("dedup: key is not in progress under this token")
	// ErrResultTooLarge is returned by Complete for a result over
	// MaxResultSize bytes; the key stays in progress.
	ErrResultTooLarge = errors.New("dedup: result too large")
	// ErrBadLease is returned by Begin for a lease that is not positive or
	// is longer than the window.
	ErrBadLease = errors.New("dedup: lease must be positive and within the window")
	// ErrBadToken is returned by ParseToken for text that is not a token.
	ErrBadToken = errors.New("dedup: bad token")
)
