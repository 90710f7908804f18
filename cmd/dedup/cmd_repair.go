package main

import (
	"flag"
	"fmt"

	"github.com/streamdedup/dedup"
)

const repairHelp = `Usage: dedup repair DIR

Opens the state directory DIR accepting the loss of commits that its store
no longer holds: a commit log cut short or damaged under a snapshot that
covers later commits, which every other command refuses (naming the files
and the commits lost) and leaves as it is. The state goes on from its
store's last intact commit; the commits after it are forgotten, and the
snapshots that covered them are kept as evidence under the name
snapshot-NNNNNN.manifest.lost. Prints what was lost. A state that lost
nothing is opened and closed unchanged. DIR must not be in use.

Example
  dedup repair ./state

Exit status
  0  repaired (or nothing to repair)
  1  DIR is missing, not a state, in use, damaged otherwise, or an I/O error
  2  bad usage
`

func newRepairFlags(e *env) *flag.FlagSet { return newFlags(e, "dedup repair", repairHelp, "") }

func runRepair(e *env, args []string) error {
	fs := newRepairFlags(e)
	pos, err := positionals(fs, args, 1, "one state directory")
	if err != nil {
		return err
	}
	dir := pos[0]
	if !isState(dir) {
		return fmt.Errorf("repair: %s is missing or empty, not a state directory", dir)
	}
	st, err := dedup.Repair(dir)
	if err != nil {
		return fmt.Errorf("repair: %w", stateErr(dir, err))
	}
	for _, p := range st.RestoreProblems {
		fmt.Fprintf(e.stdout, "problem: %s\n", p)
	}
	fmt.Fprintf(e.stdout, "repaired %s: %d keys restored (from %s), snapshot written\n", dir, st.RestoredKeys, st.RestoredFrom)
	return nil
}
