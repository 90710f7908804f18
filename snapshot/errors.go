package snapshot

import (
	"errors"

	"github.com/streamdedup/dedup/internal/errclass"
)

// Errors. Every error that reports damaged or foreign bytes wraps ErrCorrupt.
var (
	// ErrCorrupt marks a snapshot file that failed a magic, length, checksum,
	// version or consistency check, or a segment that a manifest references
	// but that is missing. Test with errors.Is. It matches dedup.ErrCorrupt
	// too.
	ErrCorrupt = errclass.Corrupt("snapshot: corrupt")
	// ErrNotFound is returned by Latest when the directory holds no snapshot.
	ErrNotFound = errors.New("snapshot: not found")
	// ErrVersion is returned for an intact file written by a newer, unknown
	// format version. It does not wrap ErrCorrupt.
	ErrVersion = errors.New("snapshot: unsupported format version")
)
