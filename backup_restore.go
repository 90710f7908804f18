package dedup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/internal/fspath"
	"github.com/streamdedup/dedup/internal/fsperm"
	"github.com/streamdedup/dedup/snapshot"
)

// RestoreBackup installs src into the new state directory dst, verifying
// it first; it refuses a dst that exists and is not empty, and a src or
// dst that an engine holds open ([ErrStateInUse]). src is either a backup
// written by [Engine.Backup] (a store, a snapshot and the
// [BackupManifest]) or, for a probabilistic state, a lone snapshot folder
// (the manifest and segments, as in a state's snapshots/ folder): the new
// state then holds the snapshot's filters and no checkpoint.
//
// A directory without a manifest is not a backup ([ErrNotBackup]): a copy
// of a state taken while it ran (cp -a) can miss committed keys and still
// open, and the hidden folder an interrupted backup leaves
// (.NAME.partial-*) is refused by name. A backup whose files fail its
// manifest is damaged ([ErrCorrupt]), naming the file. Every file written
// is fsynced, and so are the directories, before the verified state is
// renamed to dst; should the fsync of dst's parent fail after that rename,
// the state is moved back: a failed or interrupted restore leaves dst as
// it was, and src is never written. Errors name src's own files. On
// success dst opens with the returned options.
func RestoreBackup(src, dst string) (Options, error) {
	return restoreBackup(fsperm.FS(vfs.Default), src, dst)
}

// restoreBackup is RestoreBackup with every file operation of its own on
// fsys: what it reads of src, every file and directory it writes and
// fsyncs, the renames. The engine it opens to verify the copy runs on the
// file system under fsys (vfs.Root): Pebble stops the process on a failed
// fsync of its own, by design, so a fault of that engine is not a restore's
// to handle; the restore fsyncs every file that engine left, through fsys,
// before the copy is renamed into place. The operating system's file
// system is underneath: the locks are read there.
func restoreBackup(fsys vfs.FS, src, dst string) (Options, error) {
	if fspath.IsPartial(src) {
		return Options{}, fmt.Errorf("%w: restore: %q is the folder of a backup that did not finish (a backup is built as .NAME.partial-* and renamed to NAME once whole): it is not a backup; the next backup to NAME removes it",
			ErrNotBackup, src)
	}
	if err := checkRestoreTarget(fsys, dst); err != nil {
		return Options{}, err
	}
	if err := checkNotInUse(src, "restore", "a state directory that is open is not a backup: back it up with Engine.Backup (dedup backup, or DEDUP.BACKUP on a running dedup serve)"); err != nil {
		return Options{}, err
	}
	m, err := readBackupManifest(fsys, src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := fsys.Stat(fsys.PathJoin(src, SnapshotDir)); serr == nil {
			return Options{}, fmt.Errorf("%w: restore: %q holds a state directory but no %s: it was not written by a backup; a copy of a running state (cp -a) can miss committed keys, so it is not accepted (a copy of a stopped state is a state directory: open it, or back it up with dedup backup)",
				ErrNotBackup, src, BackupManifest)
		}
		return restoreLoneSnapshot(fsys, src, dst)
	case err != nil:
		return Options{}, err
	case m.Format == ServeBackupFormat:
		return Options{}, fmt.Errorf("%w: restore: %q is a backup of a dedup serve state: restore it with dedup restore (package resp, RestoreState)", ErrNotBackup, src)
	case m.Format != BackupFormat:
		return Options{}, fmt.Errorf("%w: restore: %q: backup format %q, this build reads %q", ErrNewerFormat, filepath.Join(src, BackupManifest), m.Format, BackupFormat)
	}
	return restoreFullBackup(fsys, src, dst, m)
}

// engineFS is the file system under fsys that the engine verifying a
// restore runs on (see restoreBackup).
func engineFS(fsys vfs.FS) vfs.FS { return fsperm.FS(vfs.Root(fsys)) }

// checkRestoreTarget refuses a dst that exists and is not empty, or that
// an engine holds, and makes its parent.
func checkRestoreTarget(fsys vfs.FS, dst string) error {
	if err := checkNotInUse(dst, "restore", "stop it first"); err != nil {
		return err
	}
	if ents, err := fsys.List(dst); err == nil && len(ents) > 0 {
		return fmt.Errorf("dedup: restore: %q is not empty", dst)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap(err, "restore")
	}
	if err := fsys.MkdirAll(filepath.Dir(filepath.Clean(dst)), fsperm.DirMode); err != nil {
		return wrap(err, "restore")
	}
	return nil
}

// checkNotInUse returns ErrStateInUse when an engine holds the state dir
// open (its LOCK), naming the process when the system tells; advice ends
// the message.
func checkNotInUse(dir, op, advice string) error {
	lock := filepath.Join(dir, "LOCK")
	if _, err := os.Stat(lock); err != nil {
		return nil
	}
	if pid := lockHolder(lock); pid > 0 {
		return fmt.Errorf("%w: %s: %q is open in process %d: %s", ErrStateInUse, op, dir, pid, advice)
	}
	return nil
}

// readFile returns the bytes of the file p on fsys.
func readFile(fsys vfs.FS, p string) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	return b, errors.Join(err, f.Close())
}

// readBackupManifest reads src's BackupManifest: fs.ErrNotExist when there
// is none, ErrCorrupt when it does not parse.
func readBackupManifest(fsys vfs.FS, src string) (backupManifest, error) {
	var m backupManifest
	p := fsys.PathJoin(src, BackupManifest)
	b, err := readFile(fsys, p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return m, err
		}
		return m, wrap(err, "restore")
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Format == "" {
		return m, fmt.Errorf("%w: restore: damaged backup: %s does not parse (%v)", ErrCorrupt, p, err)
	}
	return m, nil
}

// checkBackupFiles checks src's files against its manifest: each there,
// of its length, and (outside the snapshot) with its hash.
func checkBackupFiles(fsys vfs.FS, src string, m backupManifest) error {
	for _, f := range m.Files {
		p := fsys.PathJoin(src, filepath.FromSlash(f.Name))
		fi, err := fsys.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%w: restore: damaged backup: %s is missing (%s lists it)", ErrCorrupt, p, BackupManifest)
		case err != nil:
			return wrap(err, "restore")
		case fi.Size() != f.Size:
			return fmt.Errorf("%w: restore: damaged backup: %s holds %d bytes, %s says %d", ErrCorrupt, p, fi.Size(), BackupManifest, f.Size)
		case f.XXHash == "":
			continue
		}
		sum, err := fileHash(fsys, p)
		if err != nil {
			return wrap(err, "restore")
		}
		if sum != f.XXHash {
			return fmt.Errorf("%w: restore: damaged backup: %s has other bytes than when it was backed up (xxhash64 %s, %s says %s)", ErrCorrupt, p, sum, BackupManifest, f.XXHash)
		}
	}
	return nil
}

// copyBackupFiles copies the files m lists from src into the new
// directory work, fsyncing every file and directory.
func copyBackupFiles(fsys vfs.FS, src, work string, m backupManifest) error {
	if err := fsys.MkdirAll(work, fsperm.DirMode); err != nil {
		return err
	}
	dirs := map[string]bool{work: true}
	for _, f := range m.Files {
		to := fsys.PathJoin(work, filepath.FromSlash(f.Name))
		if d := filepath.Dir(to); !dirs[d] {
			if err := fsys.MkdirAll(d, fsperm.DirMode); err != nil {
				return err
			}
			dirs[d] = true
		}
		// CopyAcrossFS fsyncs the copy.
		if err := vfs.CopyAcrossFS(fsys, fsys.PathJoin(src, filepath.FromSlash(f.Name)), fsys, to); err != nil {
			return fmt.Errorf("copy %s: %w", f.Name, err)
		}
	}
	return syncTree(fsys, work, false)
}

// syncTree fsyncs the directory dir and every directory under it, and
// with files every file there too: the files and their entries are
// durable (without files, each file was fsynced by its writer).
func syncTree(fsys vfs.FS, dir string, files bool) error {
	names, err := fsys.List(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := fsys.PathJoin(dir, n)
		fi, err := fsys.Stat(p)
		switch {
		case err != nil:
			return err
		case fi.IsDir():
			err = syncTree(fsys, p, files)
		case files && fi.Mode().IsRegular():
			err = syncFile(fsys, p)
		}
		if err != nil {
			return err
		}
	}
	return syncDir(fsys, dir)
}

// syncFile fsyncs the file p.
func syncFile(fsys vfs.FS, p string) error {
	f, err := fsys.Open(p)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// renamedErr is err with the path from named to in its message: the
// errors met on a restore's scratch copy name the backup's own files.
type renamedErr struct {
	err      error
	from, to string
}

func (r *renamedErr) Error() string { return strings.ReplaceAll(r.err.Error(), r.from, r.to) }
func (r *renamedErr) Unwrap() error { return r.err }

func renamePath(err error, from, to string) error {
	if err == nil {
		return nil
	}
	return &renamedErr{err: err, from: from, to: to}
}

// scratchDir makes the hidden folder beside dst that a restore builds its
// state in (parent/.dedup-restore-PID-N), and returns it with the func that
// removes it.
func scratchDir(fsys vfs.FS, dst string) (string, func(), error) {
	parent := filepath.Dir(filepath.Clean(dst))
	tmp := fsys.PathJoin(parent, fmt.Sprintf(".dedup-restore-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := fsys.MkdirAll(tmp, fsperm.DirMode); err != nil {
		return "", nil, wrap(err, "restore")
	}
	return tmp, func() { _ = fsys.RemoveAll(tmp) }, nil
}

func restoreFullBackup(fsys vfs.FS, src, dst string, m backupManifest) (Options, error) {
	if err := checkBackupFiles(fsys, src, m); err != nil {
		return Options{}, err
	}
	// Verify on a scratch copy so that src is never written (opening a
	// Pebble store may write to it).
	tmp, remove, err := scratchDir(fsys, dst)
	if err != nil {
		return Options{}, err
	}
	defer remove()
	work := fsys.PathJoin(tmp, "state")
	if err := copyBackupFiles(fsys, src, work, m); err != nil {
		return Options{}, wrap(renamePath(err, work, src), "restore: copy %q", src)
	}
	opts, err := verifyBackup(fsys, work)
	if err != nil {
		return Options{}, renamePath(err, work, src)
	}
	return installDir(fsys, work, dst, opts)
}

// verifyBackup checks the restored copy of a backup in work, whose files
// passed the manifest: it holds a state's options and a snapshot, and it
// opens with its filters restored from that snapshot. Its errors are
// ErrCorrupt ("damaged backup") but for a state in use.
func verifyBackup(fsys vfs.FS, work string) (Options, error) {
	eng := engineFS(fsys)
	opts, err := stateOptions(eng, work, false)
	if err != nil {
		return Options{}, damaged(err, "the store does not open")
	}
	opts.FS = eng
	if _, err := exact.Check(work, exact.Options{FS: eng}); err != nil {
		return Options{}, damaged(wrap(err, "check %q", work), "a table")
	}
	// An exact state rebuilds its filters from its store when its
	// snapshot is damaged (restoredFrom's Close then writes a good one).
	if _, err := snapshot.Latest(fsys, fsys.PathJoin(work, SnapshotDir)); err != nil && (opts.Probabilistic || !errors.Is(err, ErrCorrupt)) {
		return Options{}, damaged(err, "backup snapshot")
	}
	from, err := restoredFrom(opts)
	if err != nil {
		return Options{}, damaged(err, "the backup does not open")
	}
	if from != RestoredSnapshot && from != RestoredFresh && (opts.Probabilistic || from != RestoredStore) {
		return Options{}, fmt.Errorf("%w: restore: damaged backup: snapshot unusable (restored from %s)", ErrCorrupt, from)
	}
	return opts, nil
}

// damaged wraps err as a damaged backup's, in the corruption class.
func damaged(err error, what string) error {
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrStateInUse) {
		return wrap(err, "restore: damaged backup: %s", what)
	}
	return wrap(fmt.Errorf("%w: %w", ErrCorrupt, err), "restore: damaged backup: %s", what)
}

// restoredFrom opens the state of opts and closes it again, and reports
// where Open restored its filters from (Stats.RestoredFrom).
func restoredFrom(opts Options) (string, error) {
	// The window an AutoWindow sized stays in force (Options.KeepWindow).
	opts.KeepWindow = true
	e, err := Open(opts)
	if err != nil {
		return "", err
	}
	from := e.Stats().RestoredFrom
	return from, e.Close()
}

// installDir makes the verified state work durable (every file and
// directory fsynced: the engine that verified it wrote files of its own),
// moves it into dst and fsyncs dst's parent directory; if that last fsync
// fails, it moves the state back, so that dst is as it was. The returned
// options open dst on the operating system's file system.
func installDir(fsys vfs.FS, work, dst string, opts Options) (Options, error) {
	if err := syncTree(fsys, work, true); err != nil {
		return Options{}, wrap(err, "restore: fsync %q", work)
	}
	existed := false
	if err := fsys.Remove(dst); err == nil {
		existed = true // an empty directory
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Options{}, wrap(err, "restore")
	}
	if err := fsys.Rename(work, dst); err != nil {
		err = wrap(err, "restore: install into %q", dst)
		if existed {
			err = errors.Join(err, fsys.MkdirAll(dst, fsperm.DirMode))
		}
		return Options{}, err
	}
	parent := filepath.Dir(filepath.Clean(dst))
	if err := syncDir(fsys, parent); err != nil {
		err = wrap(err, "restore: fsync %q", parent)
		if rerr := fsys.Rename(dst, work); rerr != nil {
			return Options{}, errors.Join(err, wrap(rerr, "restore: move %q back", dst))
		}
		if existed {
			err = errors.Join(err, fsys.MkdirAll(dst, fsperm.DirMode))
		}
		return Options{}, err
	}
	opts.Dir, opts.FS = dst, nil
	return opts, nil
}

func restoreLoneSnapshot(fsys vfs.FS, src, dst string) (Options, error) {
	snap, err := snapshot.Latest(fsys, src)
	if err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			return Options{}, fmt.Errorf("%w: restore: %q holds neither a backup (%s) nor a snapshot", ErrNotBackup, src, BackupManifest)
		}
		return Options{}, wrap(err, "restore: %q holds no backup (%s) and no valid snapshot", src, BackupManifest)
	}
	p, err := decodePersisted(snap.Header.Options)
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	if !p.Probabilistic {
		return Options{}, fmt.Errorf("dedup: restore: a lone snapshot can only restore a probabilistic state; an exact state needs a backup with its store (dedup backup)")
	}
	tmp, remove, err := scratchDir(fsys, dst)
	if err != nil {
		return Options{}, err
	}
	defer remove()
	work := fsys.PathJoin(tmp, "state")
	opts := p.options(work)
	opts.FS = engineFS(fsys)
	st, err := exact.Open(work, exact.Options{FS: opts.FS, LogOnly: true})
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	sched, err := snapshotSchedule(snap.Header.Options)
	if err != nil {
		return Options{}, errors.Join(wrap(err, "restore"), st.Close())
	}
	err = errors.Join(
		st.SetMeta(metaSeed, beUint64(snap.Header.Seed)),
		st.SetMeta(metaOptions, p.encode()))
	if err == nil && sched != nil {
		// The window an AutoWindow sized, kept by the snapshot.
		err = st.SetMeta(metaWindowSchedule, sched)
	}
	err = errors.Join(err, st.Close())
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	// The new store has no commits: the snapshot covers commit 0 of it.
	if err := copySnapshot(fsys, snap, fsys.PathJoin(work, SnapshotDir), 0); err != nil {
		return Options{}, wrap(err, "restore")
	}
	from, err := restoredFrom(opts)
	if err != nil {
		return Options{}, wrap(renamePath(err, work, dst), "restore")
	}
	if from != RestoredSnapshot {
		return Options{}, fmt.Errorf("dedup: restore: the installed snapshot did not load (restored from %s)", from)
	}
	return installDir(fsys, work, dst, opts)
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
	o.KeepWindow = true
	e, err := Open(o)
	if err != nil {
		return Stats{}, err
	}
	err = e.Snapshot()
	st := e.Stats()
	return st, errors.Join(err, e.Close())
}
