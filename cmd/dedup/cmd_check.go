package main

import (
	"flag"
	"fmt"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/humanize"
)

const checkHelp = `Usage: dedup check DIR

Reads every block of every table of the store of the state directory (or
backup) DIR and verifies its checksum, and reads every record of its
commit log, without changing anything. A damaged block is reported with
the file it is in. The snapshots are checked by 'dedup snapshot verify'.
DIR must not be in use.

Example
  dedup check ./state

Exit status
  0  every block and record good
  1  a damaged file (named), DIR missing, not a state, in use, or an I/O error
  2  bad usage
`

func newCheckFlags(e *env) *flag.FlagSet { return newFlags(e, "dedup check", checkHelp, "") }

func runCheck(e *env, args []string) error {
	fs := newCheckFlags(e)
	pos, err := positionals(fs, args, 1, "one state directory")
	if err != nil {
		return err
	}
	dir := pos[0]
	if !isState(dir) {
		return fmt.Errorf("check: %s is missing or empty, not a state directory", dir)
	}
	res, err := dedup.Check(dir)
	if err != nil {
		return stateErr(dir, err) // "dedup: check DIR: ..."
	}
	fmt.Fprintf(e.stdout, "ok %s: %d tables (%s), every block checksum good; %d commit-log segments, %d commits\n",
		dir, res.Tables, humanize.Bytes(uint64(res.TableBytes)), res.Segments, res.Commits)
	return nil
}
