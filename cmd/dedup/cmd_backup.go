package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/humanize"
)

// newBackupFlags is the flag set of `dedup backup`: no flags.
func newBackupFlags(e *env) *flag.FlagSet { return newFlags(e, "dedup backup", backupHelp, "") }

func runBackup(e *env, args []string) error {
	fs := newBackupFlags(e)
	pos, err := positionals(fs, args, 2, "a state directory and a destination")
	if err != nil {
		return err
	}
	dir, dest := pos[0], pos[1]
	if !isState(dir) {
		return fmt.Errorf("backup: %s is missing or empty, not a state directory", dir)
	}
	if _, err := os.Stat(dest); err == nil {
		return fmt.Errorf("backup: %s already exists: the destination must be a new directory", dest)
	}
	start := time.Now()
	opts, err := dedup.StateOptions(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", stateErr(dir, err))
	}
	opts.Logf = engineLog(e)
	eng, err := dedup.Open(opts)
	if err != nil {
		return fmt.Errorf("backup: %w", openErr(dir, err))
	}
	st := eng.Stats()
	berr := eng.Backup(dest)
	cerr := eng.Close()
	if berr != nil {
		return berr // "dedup: backup: ..."
	}
	if cerr != nil {
		return fmt.Errorf("backup: close %s: %w", dir, cerr)
	}
	size, _ := dirSize(dest)
	fmt.Fprintf(e.stdout, "backed up %s into %s: %d keys, %s (%s), in %v\n", dir, dest, st.FilterKeys,
		humanize.Bytes(size), describeOptions(opts), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "restore it with: dedup restore %s NEWDIR\n", dest)
	return nil
}

// newRestoreFlags is the flag set of `dedup restore`: no flags.
func newRestoreFlags(e *env) *flag.FlagSet { return newFlags(e, "dedup restore", restoreHelp, "") }

func runRestore(e *env, args []string) error {
	fs := newRestoreFlags(e)
	pos, err := positionals(fs, args, 2, "a backup (or snapshot folder) and a new state directory")
	if err != nil {
		return err
	}
	src, dir := pos[0], pos[1]
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	start := time.Now()
	opts, err := dedup.RestoreBackup(src, dir)
	if err != nil {
		return err // "dedup: restore: ..."
	}
	fmt.Fprintf(e.stdout, "restored %s into %s (verified) in %v\n", src, dir, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "options          %s\n", describeOptions(opts))
	// What the new state holds: open it once more, read-only in effect.
	opts.Dir = dir
	eng, err := dedup.Open(opts)
	if err != nil {
		return fmt.Errorf("restore: reopen %s: %w", dir, err)
	}
	st := eng.Stats()
	raw := eng.Checkpoint()
	if err := eng.Close(); err != nil {
		return fmt.Errorf("restore: close %s: %w", dir, err)
	}
	fmt.Fprintf(e.stdout, "keys             %d in the filters (from %s)\n", st.FilterKeys, st.RestoredFrom)
	if snap := newestSnapshot(dir); snap != nil && snap.Error == "" {
		fmt.Fprintf(e.stdout, "snapshot         %s, %s, commit %d, created %s\n", snap.Manifest, humanize.Bytes(uint64(snap.Bytes)), snap.CommitSeq, snap.Created.Format(time.RFC3339))
	}
	switch cp, err := decodeCheckpoint(raw); {
	case raw == nil:
		fmt.Fprintf(e.stdout, "checkpoint       none\n")
	case err != nil:
		fmt.Fprintf(e.stdout, "checkpoint       %d bytes, not written by dedup filter\n", len(raw))
	default:
		fmt.Fprintf(e.stdout, "checkpoint       %d events committed (%d distinct) of %v -> %s\n", cp.Counts.Events, cp.Counts.Distinct, cp.Inputs, cp.Out)
	}
	return nil
}
