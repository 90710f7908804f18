package dedup

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
)

// CheckResult is what [Check] read of a state directory's store.
type CheckResult = exact.CheckResult

// Check reads every block of every table of the exact store in the state
// directory dir, verifying its checksum, and every record of the commit
// log, without replaying or changing anything (see [exact.Check]). A
// damaged block is an error matching ErrCorrupt that names the file; a
// store in use is refused. The snapshots are checked by their own
// checksums when they are loaded (snapshot.Verify checks one).
func Check(dir string) (CheckResult, error) {
	res, err := exact.Check(dir, exact.Options{FS: vfs.Default})
	if err != nil {
		return res, wrap(err, "check %q", dir)
	}
	return res, nil
}

// LastCommit returns the sequence number of the last commit the store of
// the state directory dir holds, reading it without changing anything
// (see [exact.LastCommit]); a state open in an engine is refused. A
// snapshot (snapshot.Info.CommitSeq) past it is proof of commits the store
// lost: [Open] refuses such a state with [ErrLostCommits].
func LastCommit(dir string) (uint64, error) {
	n, err := exact.LastCommit(dir, exact.Options{FS: vfs.Default})
	if err != nil {
		return 0, wrap(err, "last commit of %q", dir)
	}
	return n, nil
}
