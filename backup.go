package dedup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/snapshot"
)

// Backup writes a consistent copy of the live state into dest, a directory
// that must not exist yet, while the engine keeps running: a fresh snapshot
// of the filters and a Pebble checkpoint of the store taken after it. A
// state installed from it with RestoreBackup holds every key committed
// before Backup began, and its Checkpoint is one that was committed. Backup
// needs a state directory (Options.Dir).
func (e *Engine) Backup(dest string) error {
	e.lifecycle.RLock()
	defer e.lifecycle.RUnlock()
	if e.closed.Load() {
		return ErrClosed
	}
	if e.opts.Dir == "" {
		return errors.New("dedup: backup: an in-memory engine has no state directory to back up")
	}
	if _, err := e.fs.Stat(dest); err == nil {
		return fmt.Errorf("dedup: backup: %q already exists", dest)
	}
	// Holding snapMu keeps the log from being truncated past the snapshot
	// until the store's checkpoint is taken.
	e.snapMu.Lock()
	defer e.snapMu.Unlock()
	info, err := e.writeSnapshot(false)
	if err != nil {
		return wrap(err, "backup")
	}
	if err := e.store.Backup(dest); err != nil {
		return wrap(err, "backup")
	}
	if err := linkSnapshot(e.fs, info, e.fs.PathJoin(dest, SnapshotDir)); err != nil {
		return wrap(err, "backup")
	}
	return nil
}

// linkSnapshot puts the snapshot info describes (its manifest and every
// segment it references) into the new directory dir, under the same
// names: hard links where the file system allows (a snapshot's files
// never change once written, and a name is never reused), copies where it
// does not.
func linkSnapshot(fs vfs.FS, info snapshot.Info, dir string) error {
	if err := fs.MkdirAll(dir, exact.PrivateDirMode); err != nil {
		return err
	}
	src := filepath.Dir(info.Path)
	names := []string{filepath.Base(info.Path)}
	for _, sg := range info.Segments {
		names = append(names, sg.Name)
	}
	for _, n := range names {
		if err := vfs.LinkOrCopy(fs, fs.PathJoin(src, n), fs.PathJoin(dir, n)); err != nil {
			return fmt.Errorf("snapshot file %s: %w", n, err)
		}
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// copySnapshot writes snap into dir, with its commit sequence set to seq.
func copySnapshot(fs vfs.FS, snap *snapshot.Snapshot, dir string, seq uint64) error {
	gens := make([]snapshot.Generation, len(snap.Generations))
	for i, g := range snap.Generations {
		payload := g.Payload
		gens[i] = snapshot.Generation{ID: g.ID, Shard: g.Shard, Start: g.Start, End: g.End, Count: g.Count,
			Kind: g.Kind, Final: g.Final, Payload: func() ([]byte, error) { return payload, nil }}
	}
	h := snap.Header
	h.CommitSeq = seq
	_, err := snapshot.Write(fs, dir, h, gens)
	return err
}

// RestoreBackup installs src into the new state directory dst, verifying
// it first; it refuses a dst that exists and is not empty. src is either a
// backup written by Backup (a store and a snapshot) or, for a probabilistic
// state, a lone snapshot folder (the manifest and segments, as in a state's
// snapshots/ folder): the new state then holds the snapshot's filters and no
// checkpoint. On success dst opens with the returned options.
func RestoreBackup(src, dst string) (Options, error) {
	if ents, err := os.ReadDir(dst); err == nil && len(ents) > 0 {
		return Options{}, fmt.Errorf("dedup: restore: %q is not empty", dst)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Options{}, wrap(err, "restore")
	}
	if _, err := os.Stat(filepath.Join(src, SnapshotDir)); err == nil {
		return restoreFullBackup(src, dst)
	}
	return restoreLoneSnapshot(src, dst)
}

func restoreFullBackup(src, dst string) (Options, error) {
	// Verify on a scratch copy so that src is never written (opening a
	// Pebble store may write to it).
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dst)), ".dedup-restore-*")
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "state")
	if err := os.CopyFS(work, os.DirFS(src)); err != nil {
		return Options{}, wrap(err, "restore: copy %q", src)
	}
	opts, err := StateOptions(work)
	if err != nil {
		return Options{}, wrap(err, "restore: %q is not a dedup backup", src)
	}
	if _, err := Check(work); err != nil {
		return Options{}, wrap(err, "restore: backup %q is damaged", src)
	}
	// An exact state rebuilds its filters from its store when its
	// snapshot is damaged (restoredFrom's Close then writes a good one).
	if _, err := snapshot.Latest(vfs.Default, filepath.Join(work, SnapshotDir)); err != nil && (opts.Probabilistic || !errors.Is(err, ErrCorrupt)) {
		return Options{}, wrap(err, "restore: backup snapshot")
	}
	from, err := restoredFrom(opts)
	if err != nil {
		return Options{}, wrap(err, "restore: backup does not open")
	}
	if from != RestoredSnapshot && from != RestoredFresh && (opts.Probabilistic || from != RestoredStore) {
		return Options{}, fmt.Errorf("%w: restore: backup snapshot unusable (restored from %s)", ErrCorrupt, from)
	}
	return installDir(work, dst, opts)
}

// restoredFrom opens the state of opts and closes it again, and reports
// where Open restored its filters from (Stats.RestoredFrom).
func restoredFrom(opts Options) (string, error) {
	e, err := Open(opts)
	if err != nil {
		return "", err
	}
	from := e.Stats().RestoredFrom
	return from, e.Close()
}

// installDir moves the verified state work into dst.
func installDir(work, dst string, opts Options) (Options, error) {
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Options{}, wrap(err, "restore")
	}
	if err := os.Rename(work, dst); err != nil {
		return Options{}, wrap(err, "restore: install into %q", dst)
	}
	opts.Dir = dst
	return opts, nil
}

func restoreLoneSnapshot(src, dst string) (Options, error) {
	snap, err := snapshot.Latest(vfs.Default, src)
	if err != nil {
		return Options{}, wrap(err, "restore: %q holds neither a backup nor a valid snapshot", src)
	}
	p, err := decodePersisted(snap.Header.Options)
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	if !p.Probabilistic {
		return Options{}, fmt.Errorf("dedup: restore: a lone snapshot can only restore a probabilistic state; an exact state needs a backup with its store (dedup backup)")
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dst)), ".dedup-restore-*")
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "state")
	opts := p.options(work)
	st, err := exact.Open(work, exact.Options{LogOnly: true})
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	err = errors.Join(
		st.SetMeta(metaSeed, beUint64(snap.Header.Seed)),
		st.SetMeta(metaOptions, p.encode()),
		st.Close())
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	// The new store has no commits: the snapshot covers commit 0 of it.
	if err := copySnapshot(exact.PrivateFS(vfs.Default), snap, filepath.Join(work, SnapshotDir), 0); err != nil {
		return Options{}, wrap(err, "restore")
	}
	from, err := restoredFrom(opts)
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	if from != RestoredSnapshot {
		return Options{}, fmt.Errorf("dedup: restore: the installed snapshot did not load (restored from %s)", from)
	}
	return installDir(work, dst, opts)
}

// RebuildSnapshot rebuilds the filters of the exact-mode state in dir from
// its store, ignoring any snapshot, and writes a fresh snapshot: the repair
// for a state whose snapshots are damaged. The state must not be open.
func RebuildSnapshot(dir string) (Stats, error) {
	o, err := StateOptions(dir)
	if err != nil {
		return Stats{}, err
	}
	if o.Probabilistic {
		return Stats{}, errors.New("dedup: rebuild: a probabilistic state has no store to rebuild from (restore a snapshot instead)")
	}
	o.IgnoreSnapshots = true
	e, err := Open(o)
	if err != nil {
		return Stats{}, err
	}
	err = e.Snapshot()
	st := e.Stats()
	return st, errors.Join(err, e.Close())
}
