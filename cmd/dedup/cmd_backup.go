package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/fspath"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/resp"
	"github.com/streamdedup/dedup/stream"
)

// backupConfig holds the flags of `dedup backup`.
type backupConfig struct {
	link, copy bool
}

// newBackupFlags is the flag set of `dedup backup`.
func newBackupFlags(e *env) (*flag.FlagSet, *backupConfig) {
	c := &backupConfig{}
	fs := newFlags(e, "dedup backup", backupHelp, "")
	fs.BoolVar(&c.copy, "copy", false, "copy every file (the default, said explicitly; contradicts --link)")
	fs.BoolVar(&c.link, "link", false, "hard-link the store's files where the file system allows instead of copying them (the backup then shares them with DIR)")
	return fs, c
}

func runBackup(e *env, args []string) error {
	fs, c := newBackupFlags(e)
	pos, err := positionals(fs, args, 2, "a state directory and a destination")
	if err != nil {
		return err
	}
	dir, dest := pos[0], pos[1]
	if c.copy && c.link {
		return usagef("backup: --copy and --link contradict each other: give one (every file is copied unless --link)")
	}
	if !isState(dir) {
		return fmt.Errorf("backup: %s is missing or empty, not a state directory", dir)
	}
	if _, err := os.Stat(dest); err == nil {
		return fmt.Errorf("backup: %s already exists: the destination must be a new directory", dest)
	}
	if in, err := fspath.Inside(dir, dest); err != nil {
		return fmt.Errorf("backup: %w", err)
	} else if in {
		return fmt.Errorf("backup: %s lies inside %s: give a destination outside the state", dest, dir)
	}
	bo := dedup.BackupOptions{Link: c.link}
	start := time.Now()
	if resp.IsState(dir) {
		tables, err := resp.BackupState(dir, dest, bo)
		if err != nil {
			if inUse(err) || errors.Is(err, dedup.ErrStateInUse) {
				return fmt.Errorf("backup: %w (a running dedup serve is backed up live with DEDUP.BACKUP, see --backup-dir)", stateErr(dir, err))
			}
			return fmt.Errorf("backup: %w", err)
		}
		size, _ := dirSize(dest)
		fmt.Fprintf(e.stdout, "backed up the dedup serve state %s into %s: %d tables (%s), %s, in %v\n", dir, dest, len(tables),
			strings.Join(tables, ", "), humanize.Bytes(size), time.Since(start).Round(time.Millisecond))
		fmt.Fprintf(e.stdout, "restore it with: dedup restore %s NEWDIR\n", dest)
		return nil
	}
	opts, err := dedup.StateOptions(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", stateErr(dir, err))
	}
	opts.Logf = engineLog(e)
	// The window --window auto sized goes into the backup as it is.
	opts.KeepWindow = true
	eng, err := dedup.Open(opts)
	if err != nil {
		return fmt.Errorf("backup: %w", openErr(dir, err))
	}
	st := eng.Stats()
	berr := eng.BackupWith(dest, bo)
	cerr := eng.Close()
	if berr != nil {
		return berr // "dedup: backup: ..."
	}
	if cerr != nil {
		return fmt.Errorf("backup: close %s: %w", dir, cerr)
	}
	size, _ := dirSize(dest)
	how := "copied"
	if c.link {
		how = "linked: shares the store's files with " + dir
	}
	fmt.Fprintf(e.stdout, "backed up %s into %s: %d keys, %s (%s), %s, in %v\n", dir, dest, st.FilterKeys,
		humanize.Bytes(size), describeOptions(opts), how, time.Since(start).Round(time.Millisecond))
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
	if resp.IsStateBackup(src) {
		tables, err := resp.RestoreState(src, dir)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		fmt.Fprintf(e.stdout, "restored the dedup serve state %s into %s (verified) in %v\n", src, dir, time.Since(start).Round(time.Millisecond))
		fmt.Fprintf(e.stdout, "tables           %d: %s\n", len(tables), strings.Join(tables, ", "))
		fmt.Fprintf(e.stdout, "serve it with: dedup serve --state %s\n", dir)
		return nil
	}
	if resp.IsState(src) {
		return fmt.Errorf("restore: %s is a dedup serve state, not a backup: back it up with dedup backup (stopped) or DEDUP.BACKUP (running), then restore that", src)
	}
	opts, err := dedup.RestoreBackup(src, dir)
	if err != nil {
		return err // "dedup: restore: ..."
	}
	fmt.Fprintf(e.stdout, "restored %s into %s (verified) in %v\n", src, dir, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "options          %s\n", describeOptions(opts))
	// What the new state holds: open it once more, read-only in effect.
	opts.Dir = dir
	opts.KeepWindow = true // leave the window --window auto sized in force
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
	switch cp, err := stream.DecodeCheckpoint(raw); {
	case raw == nil:
		fmt.Fprintf(e.stdout, "checkpoint       none\n")
	case err != nil:
		fmt.Fprintf(e.stdout, "checkpoint       %d bytes, not written by dedup filter\n", len(raw))
	default:
		fmt.Fprintf(e.stdout, "checkpoint       %d events committed (%d distinct) of %v -> %s\n", cp.Counts.Events, cp.Counts.Distinct, cp.Inputs, cp.Out)
	}
	return nil
}
