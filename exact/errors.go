package exact

import (
	"errors"

	"github.com/streamdedup/dedup/internal/errclass"
)

// ErrRecordTooLarge reports a record value longer than MaxRecordSize.
var ErrRecordTooLarge = errors.New("exact: record too large")

// ErrInMemory reports an operation an in-memory store cannot do: it keeps
// no log, no keys (only their fingerprints) and no files.
var ErrInMemory = errors.New("exact: in-memory store (no directory) keeps no log, keys or files")

// Sentinel errors. Errors returned by the package wrap them with context;
// test with errors.Is.
var (
	// ErrNotOurs reports a non-empty directory that does not hold an exact store.
	ErrNotOurs = errors.New("exact: directory holds files that are not an exact store")
	// ErrClosed reports a use of a closed Store.
	ErrClosed = errors.New("exact: store closed")
	// ErrBroken reports a Store on which a write failed; close and reopen it.
	ErrBroken = errors.New("exact: store broken by an earlier write error")
	// ErrCorrupt reports stored data that cannot be decoded. It matches
	// dedup.ErrCorrupt too.
	ErrCorrupt = errclass.Corrupt("exact: corrupt store")
	// ErrEmptyKey reports an empty key.
	ErrEmptyKey = errors.New("exact: empty key")
	// ErrKeyTooLarge reports a key longer than MaxKeySize.
	ErrKeyTooLarge = errors.New("exact: key too large")
	// ErrLogOnly reports a per-key operation on a store opened with LogOnly.
	ErrLogOnly = errors.New("exact: store keeps no keys (LogOnly)")
	// ErrNewerFormat reports a store written in a format newer than this
	// package reads.
	ErrNewerFormat = errors.New("exact: store of a newer format")
	// ErrLostCommits reports a store whose commits end before a commit
	// the caller knows was made (Options.KnownCommit). It matches
	// ErrCorrupt and dedup.ErrCorrupt too.
	ErrLostCommits = errclass.Corrupt("exact: committed commits lost")
	// ErrBatchDone reports a use of a committed or closed Batch.
	ErrBatchDone = errors.New("exact: batch already committed or closed")
)
