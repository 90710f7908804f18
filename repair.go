package dedup

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Repair opens the state directory dir accepting the loss of the commits
// its store no longer holds (see [Options.AcceptLostCommits] and
// [ErrLostCommits]), writes a snapshot and closes it. The returned Stats'
// RestoreProblems say what was lost and where the snapshots that covered
// it were set aside; a state that lost nothing is opened and closed as it
// is. dir must not be in use.
func Repair(dir string) (Stats, error) {
	o, err := stateOptions(vfs.Default, dir, true)
	if err != nil {
		return Stats{}, err
	}
	o.AcceptLostCommits = true
	o.KeepWindow = true
	e, err := Open(o)
	if err != nil {
		return Stats{}, err
	}
	err = e.Snapshot()
	st := e.Stats()
	return st, errors.Join(err, e.Close())
}
