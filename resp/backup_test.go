package resp_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// infoField returns field of an INFO text, "" if absent.
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}

// TestBackupLive: DEDUP.BACKUP of a running server, while clients keep
// marking keys, is a backup of every table (the default one, a table on
// disk not opened since the start, an EXPLICITDONE one with its
// table.json) holding every key answered before the command; it restores
// with RestoreState into a state a new server serves, where those keys
// are duplicates and DEDUP.DONE works on the EXPLICITDONE table. LASTSAVE
// and INFO persistence follow.
func TestBackupLive(t *testing.T) {
	root := t.TempDir()
	state, backups := filepath.Join(root, "state"), filepath.Join(root, "backups")
	// A table made by an earlier run, on disk but not open.
	{
		srv, addr := startNoCleanup(t, resp.Options{Dir: state})
		do := doer(t, client(t, addr))
		if got := do("BF.ADD", "cold", "c1"); got != "1" {
			t.Fatalf("BF.ADD cold = %s", got)
		}
		if err := srv.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	srv, addr := start(t, resp.Options{Dir: state, BackupDir: backups})
	c := client(t, addr)
	do := doer(t, c)
	if got := do("DEDUP.RESERVE", "jobs", "EXPLICITDONE"); got != "OK" {
		t.Fatalf("DEDUP.RESERVE = %s", got)
	}
	if got := do("DEDUP.OBSERVE", "jobs", "j1"); got != "[new]" {
		t.Fatalf("DEDUP.OBSERVE = %s", got)
	}
	begun := time.Now().Unix()
	if got := do("INFO", "persistence"); infoField(got, "rdb_saves") != "0" || infoField(got, "rdb_bgsave_in_progress") != "0" ||
		infoField(got, "rdb_last_bgsave_status") != "ok" || infoField(got, "dedup_backup_dir") != backups {
		t.Fatalf("INFO persistence before a backup:\n%s", got)
	}
	// Writers mark keys throughout; acked counts the keys answered.
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			wc := client(t, addr)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := wc.SetNX(ctx, fmt.Sprintf("w%d-%d", w, i), "1", 0).Result()
				if err != nil || !ok {
					t.Errorf("SETNX w%d-%d = %v, %v", w, i, ok, err)
					return
				}
				if w == 0 {
					acked.Store(int64(i + 1))
				}
			}
		}(w)
	}
	for acked.Load() < 500 {
		time.Sleep(time.Millisecond)
	}
	before := acked.Load()
	path, err := c.Do(ctx, "DEDUP.BACKUP", "bk1").Text()
	if err != nil || path != filepath.Join(backups, "bk1") {
		t.Fatalf("DEDUP.BACKUP = %q, %v", path, err)
	}
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	if got := do("DEDUP.BACKUP", "bk1"); !strings.Contains(got, "already exists") {
		t.Errorf("DEDUP.BACKUP onto an existing backup = %s", got)
	}
	last, err := c.Do(ctx, "LASTSAVE").Int64()
	if err != nil || last < begun {
		t.Errorf("LASTSAVE = %d, %v, want >= %d", last, err, begun)
	}
	info := do("INFO", "persistence")
	if infoField(info, "rdb_saves") != "1" || infoField(info, "dedup_last_backup") != path ||
		infoField(info, "rdb_last_save_time") != strconv.FormatInt(last, 10) {
		t.Errorf("INFO persistence after a backup:\n%s", info)
	}

	dst := filepath.Join(root, "restored")
	tables, err := resp.RestoreState(path, dst)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tables, ",") != "cold,default,jobs" {
		t.Errorf("restored tables %v", tables)
	}
	_, addr2 := start(t, resp.Options{Dir: dst})
	do2 := doer(t, client(t, addr2))
	for i := int64(0); i < before; i++ {
		if got := do2("EXISTS", fmt.Sprintf("w0-%d", i)); got != "1" {
			t.Fatalf("restored: key w0-%d answered before the backup: EXISTS = %s", i, got)
		}
	}
	if got := do2("BF.EXISTS", "cold", "c1"); got != "1" {
		t.Errorf("restored: the table on disk lost its key: %s", got)
	}
	// The EXPLICITDONE table keeps its option: j1 was in flight, not
	// Done, at the backup, so it is New again there and Done works.
	if got := do2("DEDUP.OBSERVE", "jobs", "j1"); got != "[new]" {
		t.Errorf("restored jobs: DEDUP.OBSERVE j1 = %s", got)
	}
	if got := do2("DEDUP.DONE", "jobs", "j1"); got != "1" {
		t.Errorf("restored jobs: DEDUP.DONE = %s (its table.json lost?)", got)
	}
	_ = srv
}

// startNoCleanup serves cfg on a loopback port; the caller shuts it down.
func startNoCleanup(t *testing.T, cfg resp.Options) (*resp.Server, string) {
	t.Helper()
	srv, ln := listen(t, cfg)
	go srv.Serve(ln)
	return srv, ln.Addr().String()
}

// TestBackupWritesOnlyWhereTheOperatorSaid: without --backup-dir the
// backup commands are refused; a name is one plain name under it, never a
// path; the backup directory may not overlap the state.
func TestBackupWritesOnlyWhereTheOperatorSaid(t *testing.T) {
	root := t.TempDir()
	_, addr := start(t, resp.Options{Dir: filepath.Join(root, "state")})
	do := doer(t, client(t, addr))
	for _, cmd := range [][]any{{"DEDUP.BACKUP"}, {"DEDUP.BACKUP", "x"}, {"SAVE"}, {"BGSAVE"}} {
		if got := do(cmd...); !strings.Contains(got, "--backup-dir") {
			t.Errorf("%v without a backup directory = %s", cmd, got)
		}
	}
	backups := filepath.Join(root, "backups")
	_, addr = start(t, resp.Options{Dir: filepath.Join(root, "state2"), BackupDir: backups})
	do = doer(t, client(t, addr))
	for _, name := range []string{"../escape", "/tmp/abs", "a/b", ".hidden", ""} {
		if got := do("DEDUP.BACKUP", name); !strings.Contains(got, "invalid backup name") {
			t.Errorf("DEDUP.BACKUP %q = %s", name, got)
		}
	}
	if got := do("DEDUP.BACKUP", "a", "b"); !strings.Contains(got, "syntax error") {
		t.Errorf("DEDUP.BACKUP a b = %s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "escape")); err == nil {
		t.Error("a backup escaped the backup directory")
	}
	if got := do("SAVE"); got != "OK" {
		t.Fatalf("SAVE = %s", got)
	}
	if got := do("BGSAVE"); got != "Background saving started" {
		t.Fatalf("BGSAVE = %s", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for infoField(do("INFO", "persistence"), "rdb_saves") != "2" {
		if time.Now().After(deadline) {
			t.Fatalf("BGSAVE never finished:\n%s", do("INFO", "persistence"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	ents, _ := os.ReadDir(backups)
	if len(ents) != 2 {
		t.Errorf("backup directory holds %d entries, want 2", len(ents))
	}
	for _, cfg := range []resp.Options{
		{Dir: filepath.Join(root, "s"), BackupDir: filepath.Join(root, "s", "bk")},
		{Dir: filepath.Join(root, "b", "s"), BackupDir: filepath.Join(root, "b")},
		{BackupDir: backups},
	} {
		if _, err := resp.New(cfg); !errors.Is(err, resp.ErrInvalidOptions) {
			t.Errorf("New(Dir %q, BackupDir %q) = %v, want ErrInvalidOptions", cfg.Dir, cfg.BackupDir, err)
		}
	}
}

// TestBackupStateStopped: a stopped state backs up whole with BackupState
// (every table, its table.json) and refuses a destination inside it.
func TestBackupStateStopped(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	srv, addr := startNoCleanup(t, resp.Options{Dir: state})
	do := doer(t, client(t, addr))
	do("SET", "k", "1", "NX")
	do("DEDUP.RESERVE", "jobs", "EXPLICITDONE")
	do("DEDUP.OBSERVE", "jobs", "j")
	do("DEDUP.DONE", "jobs", "j")
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := resp.BackupState(state, filepath.Join(state, "bk"), dedup.BackupOptions{}); err == nil || !strings.Contains(err.Error(), "inside") {
		t.Errorf("BackupState into the state: %v", err)
	}
	// Through a symbolic link, the state's inside is inside too.
	if err := os.Symlink(state, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := resp.BackupState(state, filepath.Join(root, "link", "bk"), dedup.BackupOptions{}); err == nil || !strings.Contains(err.Error(), "inside") {
		t.Errorf("BackupState into the state through a link: %v", err)
	}
	// What a backup into bk killed mid-way left (its process gone) is
	// removed by the next backup into bk.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, fmt.Sprintf(".bk.partial-%d-1", gone.Process.Pid))
	if err := os.MkdirAll(filepath.Join(stale, "default"), 0o700); err != nil {
		t.Fatal(err)
	}
	bk := filepath.Join(root, "bk")
	if tables, err := resp.BackupState(state, bk, dedup.BackupOptions{}); err != nil || len(tables) != 2 {
		t.Fatalf("BackupState = %v, %v", tables, err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the next backup into bk left %s (%v)", stale, err)
	}
	if !resp.IsStateBackup(bk) || resp.IsStateBackup(state) || !resp.IsState(state) {
		t.Fatal("IsStateBackup / IsState")
	}
	dst := filepath.Join(root, "restored")
	if _, err := resp.RestoreState(bk, dst); err != nil {
		t.Fatal(err)
	}
	_, addr2 := start(t, resp.Options{Dir: dst})
	do2 := doer(t, client(t, addr2))
	if got := do2("EXISTS", "k"); got != "1" {
		t.Errorf("restored EXISTS k = %s", got)
	}
	if got := do2("DEDUP.OBSERVE", "jobs", "j", "j2"); got != "[duplicate new]" {
		t.Errorf("restored jobs = %s", got)
	}
	if got := do2("DEDUP.DONE", "jobs", "j2"); got != "1" {
		t.Errorf("restored jobs: DEDUP.DONE = %s", got)
	}
}
