package dedup

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/fspath"
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
// (.NAME.partial-PID-N), every file and directory fsynced, its
// [BackupManifest] written last, and only then renamed to dest: an
// interrupted backup (a crash, kill -9) never leaves a partial dest, only
// the hidden folder, which [RestoreBackup] refuses and the next backup to
// dest removes (once its process is gone). BackupWith needs a state
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
	if inside, err := fspath.Inside(e.opts.Dir, dest); err != nil {
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
	if err := e.removeStalePartials(dest); err != nil {
		return err
	}
	work := fspath.Partial(dest)
	if err := e.backupInto(work, o); err != nil {
		return errors.Join(wrap(err, "backup"), e.fs.RemoveAll(work))
	}
	if err := e.fs.Rename(work, dest); err != nil {
		return errors.Join(wrap(err, "backup: rename into %q", dest), e.fs.RemoveAll(work))
	}
	return wrapIf(syncDir(e.fs, parent), "backup: fsync %q", parent)
}

// removeStalePartials removes the folders that backups into dest killed
// mid-way left beside it (fspath.StalePartials): the next backup to dest
// cleans up after an interrupted one.
func (e *Engine) removeStalePartials(dest string) error {
	if vfs.Root(e.fs) != vfs.Default {
		return nil
	}
	stale, err := fspath.StalePartials(dest)
	if err != nil {
		return wrap(err, "backup: look for what an interrupted backup left")
	}
	for _, p := range stale {
		if err := e.fs.RemoveAll(p); err != nil {
			return wrap(err, "backup: remove %q, left by an interrupted backup", p)
		}
		e.logf("dedup: backup: removed %s, left by an interrupted backup", p)
	}
	return nil
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
	if err == nil {
		err = copySavedAdvice(e.fs, e.dir, work)
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

// copySavedAdvice copies the state dir's saved window advice
// ([SavedAdviceFile]), if any, into the backup work (fsynced).
func copySavedAdvice(fsys vfs.FS, dir, work string) error {
	from := fsys.PathJoin(dir, SavedAdviceFile)
	if _, err := fsys.Stat(from); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	b, err := readFile(fsys, from)
	if err != nil {
		return fmt.Errorf("%s: %w", SavedAdviceFile, err)
	}
	return writeFileSync(fsys, fsys.PathJoin(work, SavedAdviceFile), b)
}
