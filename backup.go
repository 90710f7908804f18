package dedup

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/internal/fsperm"
	"github.com/streamdedup/dedup/snapshot"
)

// BackupManifest is the file a backup's writer puts into it last, just
// before it renames the backup to its final name: it lists every file of
// the store with its length and xxhash64, so that [RestoreBackup] tells a
// backup from a copy of a state directory (which has none) and a damaged
// backup (a file missing, shorter, or with other bytes) from a whole one.
const BackupManifest = "dedup-backup.json"

// Formats of a [BackupManifest]: an engine's backup ([Engine.Backup]), and
// a backup of a `dedup serve` state (package resp), which holds one
// engine backup per table.
const (
	BackupFormat      = "dedup-backup/1"
	ServeBackupFormat = "dedup-serve-backup/1"
)

// BackupOptions tune [Engine.BackupWith].
type BackupOptions struct {
	// Link hard-links the store's table files and the snapshot's files
	// into the backup instead of copying them, where the file system
	// allows (the same file system): fast and without extra disk, but the
	// backup then shares those files with the live state, so damage to one
	// (a flipped byte, a bad block) is damage to both. It is a
	// point-in-time view on the same disk, not a copy to keep. Default
	// false: every file is copied.
	Link bool
}

// backupManifest is the content of a [BackupManifest].
type backupManifest struct {
	Format    string       `json:"format"`
	Created   time.Time    `json:"created"`
	CommitSeq uint64       `json:"commit_seq"`
	Linked    bool         `json:"linked,omitempty"`
	Files     []backupFile `json:"files"`
}

// backupFile is one file of a backup's store: its path under the backup
// (slash-separated), its length and the xxhash64 of its bytes (hex). The
// snapshot's files are listed without a hash: the snapshot format checks
// its own sections, and a damaged snapshot leaves the store whole.
type backupFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	XXHash string `json:"xxhash,omitempty"`
}

// Backup is [Engine.BackupWith] with the default options: every file is
// copied.
func (e *Engine) Backup(dest string) error { return e.BackupWith(dest, BackupOptions{}) }

// BackupWith writes a consistent copy of the live state into dest, a
// directory that must not exist yet and must not lie inside the state
// directory, while the engine keeps running: a fresh snapshot of the
// filters and a Pebble checkpoint of the store taken after it. A state
// installed from it with [RestoreBackup] holds every key committed before
// Backup began, and its Checkpoint is one that was committed.
//
// The backup is built under a hidden name beside dest
// (.NAME.partial-*), every file and directory fsynced, its
// [BackupManifest] written last, and only then renamed to dest: an
// interrupted backup (a crash, kill -9) never leaves a partial dest, only
// the hidden folder, which may be removed. BackupWith needs a state
// directory (Options.Dir).
func (e *Engine) BackupWith(dest string, o BackupOptions) error {
	e.lifecycle.RLock()
	defer e.lifecycle.RUnlock()
	if e.closed.Load() {
		return ErrClosed
	}
	if e.opts.Dir == "" {
		return errors.New("dedup: backup: an in-memory engine has no state directory to back up")
	}
	if inside, err := pathInside(e.opts.Dir, dest); err != nil {
		return wrap(err, "backup")
	} else if inside {
		return fmt.Errorf("dedup: backup: %q lies inside the state directory %q: give a destination outside it", dest, e.opts.Dir)
	}
	if _, err := e.fs.Stat(dest); err == nil {
		return fmt.Errorf("dedup: backup: %q already exists", dest)
	}
	parent := filepath.Dir(filepath.Clean(dest))
	if err := e.fs.MkdirAll(parent, fsperm.DirMode); err != nil {
		return wrap(err, "backup")
	}
	work := e.fs.PathJoin(parent, fmt.Sprintf(".%s.partial-%d-%d", filepath.Base(dest), os.Getpid(), time.Now().UnixNano()))
	if err := e.backupInto(work, o); err != nil {
		return errors.Join(wrap(err, "backup"), e.fs.RemoveAll(work))
	}
	if err := e.fs.Rename(work, dest); err != nil {
		return errors.Join(wrap(err, "backup: rename into %q", dest), e.fs.RemoveAll(work))
	}
	return wrapIf(syncDir(e.fs, parent), "backup: fsync %q", parent)
}

// backupInto writes the whole backup, manifest last, into work, a
// directory that does not exist yet.
func (e *Engine) backupInto(work string, o BackupOptions) error {
	// Holding snapMu keeps the log from being truncated past the snapshot
	// until the store's checkpoint is taken.
	e.snapMu.Lock()
	info, err := e.writeSnapshot(false)
	if err == nil {
		err = e.store.Backup(work)
	}
	if err == nil {
		err = putSnapshot(e.fs, info, e.fs.PathJoin(work, SnapshotDir), o.Link)
	}
	seq := info.CommitSeq
	e.snapMu.Unlock()
	if err != nil {
		return err
	}
	if !o.Link {
		if err := unlinkFiles(e.fs, e.dir, work); err != nil {
			return err
		}
	}
	files, err := manifestFiles(e.fs, work)
	if err != nil {
		return err
	}
	m := backupManifest{Format: BackupFormat, Created: time.Now().UTC(), CommitSeq: seq, Linked: o.Link, Files: files}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSync(e.fs, e.fs.PathJoin(work, BackupManifest), append(b, '\n'))
}

// putSnapshot puts the snapshot info describes (its manifest and every
// segment it references) into the new directory dir, under the same
// names: copies, or with link hard links where the file system allows (a
// snapshot's files never change once written, and a name is never
// reused).
func putSnapshot(fs vfs.FS, info snapshot.Info, dir string, link bool) error {
	if err := fs.MkdirAll(dir, fsperm.DirMode); err != nil {
		return err
	}
	src := filepath.Dir(info.Path)
	names := []string{filepath.Base(info.Path)}
	for _, sg := range info.Segments {
		names = append(names, sg.Name)
	}
	for _, n := range names {
		put := vfs.Copy
		if link {
			put = vfs.LinkOrCopy
		}
		if err := put(fs, fs.PathJoin(src, n), fs.PathJoin(dir, n)); err != nil {
			return fmt.Errorf("snapshot file %s: %w", n, err)
		}
	}
	return syncDir(fs, dir)
}

// unlinkFiles replaces every file of the store's checkpoint in work that
// Pebble hard-linked to the live state's file in dir by a copy of its own
// (fsynced), so that the backup shares no byte with the state. On a file
// system that does not say (FileInfo other than the operating system's),
// every file is copied.
func unlinkFiles(fsys vfs.FS, dir, work string) error {
	names, err := fsys.List(work)
	if err != nil {
		return err
	}
	osFS := vfs.Root(fsys) == vfs.Default
	for _, n := range names {
		p := fsys.PathJoin(work, n)
		fi, err := fsys.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			continue
		}
		if osFS {
			// vfs wraps the operating system's FileInfo: ask os itself.
			a, err1 := os.Stat(p)
			live, err2 := os.Stat(filepath.Join(dir, n))
			if err1 != nil || err2 != nil || !os.SameFile(a, live) {
				continue // Pebble copied it, or the live state dropped it
			}
		}
		tmp := p + ".copy"
		if err := vfs.Copy(fsys, p, tmp); err != nil {
			return fmt.Errorf("copy %s: %w", n, err)
		}
		if err := fsys.Rename(tmp, p); err != nil {
			return err
		}
	}
	return syncDir(fsys, work)
}

// manifestFiles lists the files under work for a [BackupManifest]: every
// file, with its xxhash64 outside the snapshot folder.
func manifestFiles(fsys vfs.FS, work string) ([]backupFile, error) {
	var out []backupFile
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		names, err := fsys.List(dir)
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			p, r := fsys.PathJoin(dir, n), n
			if rel != "" {
				r = rel + "/" + n
			}
			fi, err := fsys.Stat(p)
			if err != nil {
				return err
			}
			if fi.IsDir() {
				if err := walk(p, r); err != nil {
					return err
				}
				continue
			}
			f := backupFile{Name: r, Size: fi.Size()}
			if rel != SnapshotDir {
				if f.XXHash, err = fileHash(fsys, p); err != nil {
					return err
				}
			}
			out = append(out, f)
		}
		return nil
	}
	return out, walk(work, "")
}

// fileHash returns the xxhash64 of the file at p, in hex.
func fileHash(fsys vfs.FS, p string) (string, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := xxhash.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeFileSync writes b into a new file p (through p.tmp, fsynced,
// renamed) and fsyncs its directory.
func writeFileSync(fsys vfs.FS, p string, b []byte) error {
	tmp := p + ".tmp"
	f, err := fsys.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, p); err != nil {
		return err
	}
	return syncDir(fsys, filepath.Dir(p))
}

// syncDir fsyncs the directory dir.
func syncDir(fsys vfs.FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// pathInside reports whether p is dir or lies under it (after making both
// absolute and resolving the symbolic links of their existing parts).
func pathInside(dir, p string) (bool, error) {
	d, err := realPath(dir)
	if err != nil {
		return false, err
	}
	q, err := realPath(p)
	if err != nil {
		return false, err
	}
	rel, err := filepath.Rel(d, q)
	if err != nil {
		return false, nil
	}
	return rel == "." || rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)), nil
}

// realPath is p absolute, with the symbolic links of its longest existing
// prefix resolved.
func realPath(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for cur := a; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest), nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return a, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
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
// it first; it refuses a dst that exists and is not empty, and a src or
// dst that an engine holds open ([ErrStateInUse]). src is either a backup
// written by [Engine.Backup] (a store, a snapshot and the
// [BackupManifest]) or, for a probabilistic state, a lone snapshot folder
// (the manifest and segments, as in a state's snapshots/ folder): the new
// state then holds the snapshot's filters and no checkpoint.
//
// A directory without a manifest is not a backup ([ErrNotBackup]): a copy
// of a state taken while it ran (cp -a) can miss committed keys and still
// open. A backup whose files fail its manifest is damaged ([ErrCorrupt]),
// naming the file. Every file written is fsynced, and so are the
// directories, before the verified state is renamed to dst: an
// interrupted restore leaves dst as it was. Errors name src's own files.
// On success dst opens with the returned options.
func RestoreBackup(src, dst string) (Options, error) {
	if err := checkRestoreTarget(dst); err != nil {
		return Options{}, err
	}
	if err := checkNotInUse(src, "restore", "a state directory that is open is not a backup: back it up with Engine.Backup (dedup backup, or DEDUP.BACKUP on a running dedup serve)"); err != nil {
		return Options{}, err
	}
	m, err := readBackupManifest(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(filepath.Join(src, SnapshotDir)); serr == nil {
			return Options{}, fmt.Errorf("%w: restore: %q holds a state directory but no %s: it was not written by a backup; a copy of a running state (cp -a) can miss committed keys, so it is not accepted (a copy of a stopped state is a state directory: open it, or back it up with dedup backup)",
				ErrNotBackup, src, BackupManifest)
		}
		return restoreLoneSnapshot(src, dst)
	case err != nil:
		return Options{}, err
	case m.Format == ServeBackupFormat:
		return Options{}, fmt.Errorf("%w: restore: %q is a backup of a dedup serve state: restore it with dedup restore (package resp, RestoreState)", ErrNotBackup, src)
	case m.Format != BackupFormat:
		return Options{}, fmt.Errorf("%w: restore: %q: backup format %q, this build reads %q", ErrNewerFormat, filepath.Join(src, BackupManifest), m.Format, BackupFormat)
	}
	return restoreFullBackup(src, dst, m)
}

// checkRestoreTarget refuses a dst that exists and is not empty, or that
// an engine holds.
func checkRestoreTarget(dst string) error {
	if err := checkNotInUse(dst, "restore", "stop it first"); err != nil {
		return err
	}
	if ents, err := os.ReadDir(dst); err == nil && len(ents) > 0 {
		return fmt.Errorf("dedup: restore: %q is not empty", dst)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap(err, "restore")
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(dst)), fsperm.DirMode); err != nil {
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

// readBackupManifest reads src's BackupManifest: fs.ErrNotExist when there
// is none, ErrCorrupt when it does not parse.
func readBackupManifest(src string) (backupManifest, error) {
	var m backupManifest
	p := filepath.Join(src, BackupManifest)
	b, err := os.ReadFile(p)
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
func checkBackupFiles(src string, m backupManifest) error {
	for _, f := range m.Files {
		p := filepath.Join(src, filepath.FromSlash(f.Name))
		fi, err := os.Stat(p)
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
		sum, err := fileHash(vfs.Default, p)
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
func copyBackupFiles(src, work string, m backupManifest) error {
	dirs := map[string]bool{work: true}
	if err := fsperm.MkdirAll(work); err != nil {
		return err
	}
	fsys := fsperm.FS(vfs.Default)
	for _, f := range m.Files {
		to := filepath.Join(work, filepath.FromSlash(f.Name))
		if d := filepath.Dir(to); !dirs[d] {
			if err := fsys.MkdirAll(d, fsperm.DirMode); err != nil {
				return err
			}
			dirs[d] = true
		}
		if err := vfs.CopyAcrossFS(vfs.Default, filepath.Join(src, filepath.FromSlash(f.Name)), fsys, to); err != nil {
			return fmt.Errorf("copy %s: %w", f.Name, err)
		}
	}
	for d := range dirs {
		if err := syncDir(vfs.Default, d); err != nil {
			return err
		}
	}
	return nil
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

func restoreFullBackup(src, dst string, m backupManifest) (Options, error) {
	if err := checkBackupFiles(src, m); err != nil {
		return Options{}, err
	}
	// Verify on a scratch copy so that src is never written (opening a
	// Pebble store may write to it).
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dst)), ".dedup-restore-*")
	if err != nil {
		return Options{}, wrap(err, "restore")
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "state")
	if err := copyBackupFiles(src, work, m); err != nil {
		return Options{}, wrap(renamePath(err, work, src), "restore: copy %q", src)
	}
	opts, err := verifyBackup(work)
	if err != nil {
		return Options{}, renamePath(err, work, src)
	}
	return installDir(work, dst, opts)
}

// verifyBackup checks the restored copy of a backup in work, whose files
// passed the manifest: it holds a state's options and a snapshot, and it
// opens with its filters restored from that snapshot. Its errors are
// ErrCorrupt ("damaged backup") but for a state in use.
func verifyBackup(work string) (Options, error) {
	opts, err := StateOptions(work)
	if err != nil {
		return Options{}, damaged(err, "the store does not open")
	}
	if _, err := Check(work); err != nil {
		return Options{}, damaged(err, "a table")
	}
	// An exact state rebuilds its filters from its store when its
	// snapshot is damaged (restoredFrom's Close then writes a good one).
	if _, err := snapshot.Latest(vfs.Default, filepath.Join(work, SnapshotDir)); err != nil && (opts.Probabilistic || !errors.Is(err, ErrCorrupt)) {
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
	e, err := Open(opts)
	if err != nil {
		return "", err
	}
	from := e.Stats().RestoredFrom
	return from, e.Close()
}

// installDir moves the verified state work into dst and fsyncs dst's
// parent directory.
func installDir(work, dst string, opts Options) (Options, error) {
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Options{}, wrap(err, "restore")
	}
	if err := os.Rename(work, dst); err != nil {
		return Options{}, wrap(err, "restore: install into %q", dst)
	}
	parent := filepath.Dir(filepath.Clean(dst))
	if err := syncDir(vfs.Default, parent); err != nil {
		return Options{}, wrap(err, "restore: fsync %q", parent)
	}
	opts.Dir = dst
	return opts, nil
}

func restoreLoneSnapshot(src, dst string) (Options, error) {
	snap, err := snapshot.Latest(vfs.Default, src)
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
	if err := copySnapshot(fsperm.FS(vfs.Default), snap, filepath.Join(work, SnapshotDir), 0); err != nil {
		return Options{}, wrap(err, "restore")
	}
	from, err := restoredFrom(opts)
	if err != nil {
		return Options{}, wrap(renamePath(err, work, dst), "restore")
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
