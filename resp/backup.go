package resp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/fspath"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// Backups of a server's state. A backup of a state root is a directory
// holding, for each table, DEST/<table>/table.json (its options, as in
// the state) and DEST/<table>/engine (the engine's backup,
// [dedup.Engine.Backup]), and last DEST/dedup-backup.json
// ([dedup.BackupManifest], format [dedup.ServeBackupFormat]) listing the
// tables. It is built under a hidden name beside DEST and renamed to DEST
// once whole: an interrupted backup leaves no DEST. [Server.Backup] writes
// one from a running server (DEDUP.BACKUP, SAVE, BGSAVE), [BackupState]
// from a stopped state, and [RestoreState] installs one.

// serveManifest is the dedup-backup.json of a state root's backup.
type serveManifest struct {
	Format  string    `json:"format"`
	Created time.Time `json:"created"`
	Tables  []string  `json:"tables"`
}

// backupRun is the server's backup bookkeeping, for INFO persistence and
// LASTSAVE.
type backupRun struct {
	wg sync.WaitGroup // background backups (BGSAVE)

	mu        sync.Mutex
	running   bool          // guarded by mu
	started   time.Time     // guarded by mu: of the running backup
	last      time.Time     // guarded by mu: end of the last successful backup
	lastPath  string        // guarded by mu
	lastErr   string        // guarded by mu: of the last backup, "" if it succeeded
	lastTook  time.Duration // guarded by mu; -1 before the first
	saves     int64         // guarded by mu: successful backups
	newAtLast uint64        // guarded by mu: keys answered New when the last good one began
}

// backupNameOK reports whether name can name a backup under the backup
// directory: one path element of A-Z a-z 0-9 _ - . : not starting with '.'.
func backupNameOK(name string) bool { return validTableName(name) }

// validateBackupDir checks BackupDir against Dir, for Validate.
func (c *Options) validateBackupDir() []string {
	if c.BackupDir == "" {
		return nil
	}
	if c.Dir == "" {
		return []string{"BackupDir is set but Dir is not: an in-memory server has no state to back up"}
	}
	in1, err1 := fspath.Inside(c.Dir, c.BackupDir)
	in2, err2 := fspath.Inside(c.BackupDir, c.Dir)
	if err1 != nil || err2 != nil {
		return []string{fmt.Sprintf("BackupDir %q: %v", c.BackupDir, errors.Join(err1, err2))}
	}
	if in1 || in2 {
		return []string{fmt.Sprintf("BackupDir %q and Dir %q overlap: backups go outside the state, and the state outside the backups", c.BackupDir, c.Dir)}
	}
	return nil
}

// Backup writes a consistent backup of every table of the running server
// (those open and those on disk, which it opens) into BackupDir/name,
// which must not exist; name "" is backup-<UTC time>. Each table first
// commits what it holds, so every key answered before Backup began is in
// the backup, and is then backed up live ([dedup.Engine.Backup]) while
// commands go on; tables are backed up one after the other, each at its
// own moment. It returns the backup's path. One backup runs at a time
// ([ErrBackupRunning]).
func (s *Server) Backup(name string) (string, error) {
	if s.cfg.BackupDir == "" {
		return "", ErrBackupDisabled
	}
	if name == "" {
		name = "backup-" + time.Now().UTC().Format("20060102T150405.000Z")
	}
	if !backupNameOK(name) {
		return "", fmt.Errorf("%w %q: one name of up to %d of A-Z a-z 0-9 _ - . : not starting with '.', written under the backup directory", ErrBadBackupName, name, maxTableName)
	}
	b := &s.bk
	b.mu.Lock()
	if b.running {
		b.mu.Unlock()
		return "", ErrBackupRunning
	}
	b.running, b.started = true, time.Now()
	b.mu.Unlock()
	newAt := s.newVerdicts()
	dest := filepath.Join(s.cfg.BackupDir, name)
	err := s.backupTo(dest)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running = false
	b.lastTook = time.Since(b.started)
	if err != nil {
		b.lastErr = err.Error()
		return "", err
	}
	b.last, b.lastPath, b.lastErr = time.Now(), dest, ""
	b.saves++
	b.newAtLast = newAt
	return dest, nil
}

// backgroundBackup starts Backup in its own goroutine (BGSAVE); Shutdown
// waits for it.
func (s *Server) backgroundBackup() error {
	if s.cfg.BackupDir == "" {
		return ErrBackupDisabled
	}
	b := &s.bk
	b.mu.Lock()
	running := b.running
	b.mu.Unlock()
	if running {
		return ErrBackupRunning
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if _, err := s.Backup(""); err != nil && !errors.Is(err, ErrBackupRunning) {
			s.logf("resp: background backup: %v", err)
		}
	}()
	return nil
}

// newVerdicts sums the New verdicts of the open tables.
func (s *Server) newVerdicts() uint64 {
	var n uint64
	for _, t := range s.Tables() {
		n += t.Stats.New
	}
	return n
}

// backupTo writes the backup of every table into dest.
func (s *Server) backupTo(dest string) error {
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("resp: backup %q already exists", dest)
	}
	names, err := stateTables(s.cfg.Dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := s.lookup(n, false); err != nil {
			return fmt.Errorf("resp: backup: table %q: %w", n, err)
		}
	}
	tables := s.allTables()
	return writeStateBackup(dest, func(work string) ([]string, error) {
		var done []string
		for _, t := range tables {
			if err := t.backup(filepath.Join(work, t.name), s.cfg.Dir); err != nil {
				return nil, err
			}
			done = append(done, t.name)
		}
		return done, nil
	})
}

// backup commits the table and backs it up into dir (new): its engine's
// backup and its table.json, read from the state root.
func (t *table) backup(dir, root string) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errTableClosed
	}
	t.fresh.Store(0)
	if err := t.eng.Commit(nil); err != nil {
		return fmt.Errorf("resp: backup: table %q: commit: %w", t.name, err)
	}
	if err := fsperm.MkdirAll(dir); err != nil {
		return err
	}
	if err := t.eng.Backup(filepath.Join(dir, engineDir)); err != nil {
		return fmt.Errorf("resp: backup: table %q: %w", t.name, err)
	}
	return copyTableFile(filepath.Join(root, t.name), dir)
}

// copyTableFile copies from/table.json into the directory to, fsynced.
func copyTableFile(from, to string) error {
	b, err := os.ReadFile(filepath.Join(from, tableFile))
	if err != nil {
		return fmt.Errorf("resp: backup: %w", err)
	}
	if err := writeSync(filepath.Join(to, tableFile), b); err != nil {
		return fmt.Errorf("resp: backup: %w", err)
	}
	return syncDir(to)
}

// stateTables lists the tables of the state root: its folders holding a
// table.json.
func stateTables(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("resp: state %q: %w", root, err)
	}
	var out []string
	for _, de := range ents {
		if !de.IsDir() || !validTableName(de.Name()) {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, de.Name(), tableFile)); err == nil {
			out = append(out, de.Name())
		}
	}
	return out, nil
}

// IsState reports whether dir is a `dedup serve` state root: it holds at
// least one table (a folder with a table.json).
func IsState(dir string) bool {
	ts, err := stateTables(dir)
	return err == nil && len(ts) > 0
}

// IsStateBackup reports whether dir is a backup of a state root.
func IsStateBackup(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, dedup.BackupManifest))
	if err != nil {
		return false
	}
	var m serveManifest
	return json.Unmarshal(b, &m) == nil && m.Format == dedup.ServeBackupFormat
}

// writeStateBackup builds a state backup under a hidden name beside dest
// with fill, which backs the tables up into the folder it is given and
// returns their names, then writes the manifest and renames it to dest.
func writeStateBackup(dest string, fill func(work string) ([]string, error)) error {
	parent := filepath.Dir(filepath.Clean(dest))
	if err := os.MkdirAll(parent, fsperm.DirMode); err != nil {
		return fmt.Errorf("resp: backup: %w", err)
	}
	// What a backup into dest killed mid-way left is removed.
	stale, err := fspath.StalePartials(dest)
	if err != nil {
		return fmt.Errorf("resp: backup: %w", err)
	}
	for _, p := range stale {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("resp: backup: remove %q, left by an interrupted backup: %w", p, err)
		}
	}
	work := fspath.Partial(dest)
	if err := fsperm.MkdirAll(work); err != nil {
		return fmt.Errorf("resp: backup: %w", err)
	}
	fail := func(err error) error { return errors.Join(err, os.RemoveAll(work)) }
	tables, err := fill(work)
	if err != nil {
		return fail(err)
	}
	slices.Sort(tables)
	m, err := json.MarshalIndent(serveManifest{Format: dedup.ServeBackupFormat, Created: time.Now().UTC(), Tables: tables}, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := writeSync(filepath.Join(work, dedup.BackupManifest), append(m, '\n')); err != nil {
		return fail(fmt.Errorf("resp: backup: %w", err))
	}
	if err := syncDir(work); err != nil {
		return fail(fmt.Errorf("resp: backup: %w", err))
	}
	if err := os.Rename(work, dest); err != nil {
		return fail(fmt.Errorf("resp: backup: %w", err))
	}
	return syncDir(parent)
}

// BackupState backs up the stopped state root into dest, which must not
// exist and must not lie inside root: every table, its engine
// ([dedup.Engine.BackupWith] with o) and its table.json. A table open in
// a running server is refused ([dedup.ErrStateInUse]): back a running
// server up with DEDUP.BACKUP. It returns the tables backed up.
func BackupState(root, dest string, o dedup.BackupOptions) ([]string, error) {
	names, err := stateTables(root)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("resp: %q holds no table (no <table>/%s)", root, tableFile)
	}
	if in, err := fspath.Inside(root, dest); err != nil {
		return nil, fmt.Errorf("resp: backup: %w", err)
	} else if in {
		return nil, fmt.Errorf("resp: backup: %q lies inside the state %q: give a destination outside it", dest, root)
	}
	if _, err := os.Lstat(dest); err == nil {
		return nil, fmt.Errorf("resp: backup: %q already exists", dest)
	}
	var tables []string
	err = writeStateBackup(dest, func(work string) ([]string, error) {
		for _, n := range names {
			if err := backupStoppedTable(root, n, filepath.Join(work, n), o); err != nil {
				return nil, err
			}
		}
		tables = names
		return names, nil
	})
	return tables, err
}

// backupStoppedTable opens table name of the stopped state root and backs
// it up into dir.
func backupStoppedTable(root, name, dir string, o dedup.BackupOptions) error {
	eo, err := dedup.StateOptions(EngineDir(root, name))
	if err != nil {
		return fmt.Errorf("resp: backup: table %q: %w", name, err)
	}
	eng, err := dedup.Open(eo)
	if err != nil {
		return fmt.Errorf("resp: backup: table %q: %w", name, err)
	}
	if err := fsperm.MkdirAll(dir); err != nil {
		return errors.Join(err, eng.Close())
	}
	berr := eng.BackupWith(filepath.Join(dir, engineDir), o)
	if err := errors.Join(berr, eng.Close()); err != nil {
		return fmt.Errorf("resp: backup: table %q: %w", name, err)
	}
	return copyTableFile(filepath.Join(root, name), dir)
}

// RestoreState installs the state backup src into the new state root dst
// (absent or empty): each table's engine through [dedup.RestoreBackup],
// which verifies it, and its table.json, every file and directory
// fsynced, the whole renamed to dst at the end. It returns the tables
// restored.
func RestoreState(src, dst string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(src, dedup.BackupManifest))
	if err != nil {
		return nil, fmt.Errorf("%w: restore: %q: %w", dedup.ErrNotBackup, src, err)
	}
	var m serveManifest
	if err := json.Unmarshal(b, &m); err != nil || m.Format != dedup.ServeBackupFormat || len(m.Tables) == 0 {
		return nil, fmt.Errorf("%w: restore: damaged backup: %s is not a state backup's manifest (%v)", dedup.ErrCorrupt, filepath.Join(src, dedup.BackupManifest), err)
	}
	if ents, err := os.ReadDir(dst); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("resp: restore: %q is not empty", dst)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("resp: restore: %w", err)
	}
	parent := filepath.Dir(filepath.Clean(dst))
	if err := os.MkdirAll(parent, fsperm.DirMode); err != nil {
		return nil, fmt.Errorf("resp: restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".dedup-restore-*")
	if err != nil {
		return nil, fmt.Errorf("resp: restore: %w", err)
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "state")
	if err := fsperm.MkdirAll(work); err != nil {
		return nil, fmt.Errorf("resp: restore: %w", err)
	}
	for _, n := range m.Tables {
		if !validTableName(n) {
			return nil, fmt.Errorf("%w: restore: damaged backup: %s names table %q", dedup.ErrCorrupt, filepath.Join(src, dedup.BackupManifest), n)
		}
		from, to := filepath.Join(src, n), filepath.Join(work, n)
		if _, err := os.Stat(filepath.Join(from, tableFile)); err != nil {
			return nil, fmt.Errorf("%w: restore: damaged backup: table %q: %w", dedup.ErrCorrupt, n, err)
		}
		if err := fsperm.MkdirAll(to); err != nil {
			return nil, fmt.Errorf("resp: restore: %w", err)
		}
		if _, err := dedup.RestoreBackup(filepath.Join(from, engineDir), filepath.Join(to, engineDir)); err != nil {
			return nil, fmt.Errorf("resp: restore: table %q: %w", n, err)
		}
		if err := copyTableFile(from, to); err != nil {
			return nil, err
		}
	}
	if err := syncDir(work); err != nil {
		return nil, fmt.Errorf("resp: restore: %w", err)
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("resp: restore: %w", err)
	}
	if err := os.Rename(work, dst); err != nil {
		return nil, fmt.Errorf("resp: restore: install into %q: %w", dst, err)
	}
	if err := syncDir(parent); err != nil {
		// Not durable: move it back, so that dst is as it was.
		return nil, errors.Join(fmt.Errorf("resp: restore: %w", err), os.Rename(dst, work))
	}
	return m.Tables, nil
}

// cmdBackup serves DEDUP.BACKUP [name]: a backup of every table into the
// backup directory, answered with its path once written.
func (s *Server) cmdBackup(c *conn, _ *table, args [][]byte) {
	name := ""
	switch len(args) {
	case 1:
	case 2:
		if name = string(args[1]); name == "" {
			c.WriteError("ERR invalid backup name '': give a name, or none for backup-<UTC time>")
			return
		}
	default:
		c.WriteError("ERR syntax error: DEDUP.BACKUP [name]")
		return
	}
	p, err := s.Backup(name)
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteBulkString(p)
}

// cmdSave serves SAVE: DEDUP.BACKUP with a generated name, answered OK.
func (s *Server) cmdSave(c *conn, _ *table, _ [][]byte) {
	if _, err := s.Backup(""); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

// cmdBGSave serves BGSAVE [SCHEDULE]: SAVE in the background.
func (s *Server) cmdBGSave(c *conn, _ *table, args [][]byte) {
	if len(args) == 2 && !strings.EqualFold(string(args[1]), "schedule") {
		c.WriteError("ERR syntax error: BGSAVE [SCHEDULE]")
		return
	}
	if err := s.backgroundBackup(); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("Background saving started")
}

// cmdLastSave serves LASTSAVE: the unix time of the last successful
// backup, or, as Redis reports the load of its data, the server's start.
func (s *Server) cmdLastSave(c *conn, _ *table, _ [][]byte) {
	c.WriteInt64(s.lastSave().Unix())
}

func (s *Server) lastSave() time.Time {
	s.bk.mu.Lock()
	defer s.bk.mu.Unlock()
	if s.bk.saves == 0 {
		return s.started
	}
	return s.bk.last
}

// persistenceInfo writes INFO's Persistence section: the fields Redis
// tools read (rdb_* for the backups, aof_* off) and dedup's own.
func (s *Server) persistenceInfo(line func(k string, v any)) {
	newNow := s.newVerdicts()
	b := &s.bk
	b.mu.Lock()
	defer b.mu.Unlock()
	last := b.last
	if b.saves == 0 {
		last = s.started
	}
	status := "ok"
	if b.lastErr != "" {
		status = "err"
	}
	took, current := int64(-1), int64(-1)
	if b.saves > 0 || b.lastErr != "" {
		took = int64(b.lastTook.Seconds())
	}
	if b.running {
		current = int64(time.Since(b.started).Seconds())
	}
	inProgress := 0
	if b.running {
		inProgress = 1
	}
	line("loading", 0)
	line("async_loading", 0)
	line("rdb_changes_since_last_save", newNow-min(newNow, b.newAtLast))
	line("rdb_bgsave_in_progress", inProgress)
	line("rdb_last_save_time", last.Unix())
	line("rdb_last_bgsave_status", status)
	line("rdb_last_bgsave_time_sec", took)
	line("rdb_current_bgsave_time_sec", current)
	line("rdb_saves", b.saves)
	line("aof_enabled", 0)
	line("aof_rewrite_in_progress", 0)
	line("dedup_backup_dir", s.cfg.BackupDir)
	line("dedup_last_backup", b.lastPath)
	if b.lastErr != "" {
		line("dedup_last_backup_error", strings.NewReplacer("\r", " ", "\n", " ").Replace(b.lastErr))
	}
}

func init() {
	register(
		command{name: "dedup.backup", arity: -1, run: (*Server).cmdBackup},
		command{name: "save", arity: 1, run: (*Server).cmdSave},
		command{name: "bgsave", arity: -1, run: (*Server).cmdBGSave},
		command{name: "lastsave", arity: 1, flags: flagFast, run: (*Server).cmdLastSave},
	)
}
