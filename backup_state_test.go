package dedup_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// backupState makes a closed exact state in root/live holding keys
// key0..key(n-1), committed, and returns its options.
func backupState(t testing.TB, root string, n int) Options {
	t.Helper()
	o := Options{Dir: filepath.Join(root, "live"), Shards: 2}
	e := openT(t, o)
	for i := 0; i < n; i++ {
		if _, err := e.Observe(fmt.Appendf(nil, "key%d", i)); err != nil {
			t.Fatal(err)
		}
		if i%5000 == 4999 {
			mustCommit(t, e, fmt.Sprint(i+1))
		}
	}
	mustCommit(t, e, fmt.Sprint(n))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return o
}

// checkRestored restores bk into a new directory and checks that every
// step-th key of key0..key(n-1) is Duplicate there.
func checkRestored(t testing.TB, bk string, n, step int) {
	t.Helper()
	ro, err := RestoreBackup(bk, filepath.Join(filepath.Dir(bk), filepath.Base(bk)+"-restored"))
	if err != nil {
		t.Fatalf("restore %s: %v", bk, err)
	}
	r := openT(t, ro)
	defer r.Close()
	for i := 0; i < n; i += step {
		if v, err := r.Peek(fmt.Appendf(nil, "key%d", i)); err != nil || v != Duplicate {
			t.Fatalf("restored %s: key%d is %v (%v), want Duplicate", bk, i, v, err)
		}
	}
}

// TestBackupCopiesFiles: a backup shares no file with the live state (a
// byte flipped in one is not flipped in the other), unless asked to link.
func TestBackupCopiesFiles(t *testing.T) {
	root := t.TempDir()
	o := backupState(t, root, 3000)
	e := openT(t, o)
	defer e.Close()
	bk := filepath.Join(root, "bk")
	if err := e.Backup(bk); err != nil {
		t.Fatal(err)
	}
	shared := func(bk string) (n int) {
		err := filepath.WalkDir(bk, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(bk, p)
			a, err1 := os.Stat(p)
			b, err2 := os.Stat(filepath.Join(o.Dir, rel))
			if err1 == nil && err2 == nil && os.SameFile(a, b) {
				t.Logf("shared: %s", rel)
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := shared(bk); n != 0 {
		t.Fatalf("the backup shares %d files with the live state", n)
	}
	linked := filepath.Join(root, "linked")
	if err := e.BackupWith(linked, BackupOptions{Link: true}); err != nil {
		t.Fatal(err)
	}
	if n := shared(linked); n == 0 {
		t.Fatal("a linked backup shares no file with the live state")
	}
	checkRestored(t, bk, 3000, 7)
}

// TestBackupRefusesDestInsideState: a backup into the state directory
// would back up into what it copies.
func TestBackupRefusesDestInsideState(t *testing.T) {
	root := t.TempDir()
	o := backupState(t, root, 10)
	e := openT(t, o)
	defer e.Close()
	for _, dest := range []string{filepath.Join(o.Dir, "bk"), filepath.Join(o.Dir, SnapshotDir, "x", "bk")} {
		if err := e.Backup(dest); err == nil || !strings.Contains(err.Error(), "inside the state directory") {
			t.Errorf("backup into %s: %v", dest, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "bk")); err == nil {
		t.Error("a refused backup left its destination")
	}
}

// copyTree copies the directory src to the new dst, as cp -a would.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreTellsACopyFromABackup: a copy of a state directory (cp -a)
// has no backup manifest and is refused as no backup; a backup whose
// files were changed since is refused as damaged, naming the backup's own
// file (not the scratch copy restore verifies).
func TestRestoreTellsACopyFromABackup(t *testing.T) {
	root := t.TempDir()
	o := backupState(t, root, 3000)
	cp := filepath.Join(root, "copy")
	copyTree(t, o.Dir, cp)
	if _, err := RestoreBackup(cp, filepath.Join(root, "r1")); !errors.Is(err, ErrNotBackup) || !strings.Contains(err.Error(), "cp -a") {
		t.Fatalf("restore of a copy: %v, want ErrNotBackup", err)
	}
	e := openT(t, o)
	bk := filepath.Join(root, "bk")
	if err := e.Backup(bk); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	var sst string
	ents, _ := os.ReadDir(bk)
	for _, de := range ents {
		if strings.HasSuffix(de.Name(), ".sst") {
			sst = filepath.Join(bk, de.Name())
		}
	}
	if sst == "" {
		t.Fatalf("no table file in the backup: %v", ents)
	}
	orig, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), orig...)
	flipped[len(flipped)/2] ^= 0x10
	for _, tc := range []struct {
		name    string
		damage  func()
		mention string
	}{
		{"flipped byte", func() { os.WriteFile(sst, flipped, 0o600) }, "other bytes"},
		{"truncated", func() { os.WriteFile(sst, orig[:100], 0o600) }, "holds 100 bytes"},
		{"missing", func() { os.Remove(sst) }, "missing"},
	} {
		tc.damage()
		_, err := RestoreBackup(bk, filepath.Join(root, "r-"+strings.ReplaceAll(tc.name, " ", "-")))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "damaged backup") ||
			!strings.Contains(err.Error(), sst) || !strings.Contains(err.Error(), tc.mention) || strings.Contains(err.Error(), ".dedup-restore") {
			t.Errorf("%s: restore: %v", tc.name, err)
		}
		if err := os.WriteFile(sst, orig, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Undamaged again, it restores.
	checkRestored(t, bk, 3000, 11)
	// A manifest that does not parse is damage too.
	if err := os.WriteFile(filepath.Join(bk, BackupManifest), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreBackup(bk, filepath.Join(root, "r-manifest")); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "damaged backup") {
		t.Fatalf("restore with a bad manifest: %v", err)
	}
}

// backupChildEnv makes this test binary, re-executed, the child of
// TestBackupKilled: TestBackupKilledChild then backs the state up in a
// loop until it is killed.
const backupChildEnv = "DEDUP_BACKUP_CHILD_DIR"

// TestBackupKilledChild is the child of TestBackupKilled: it opens the
// state, prints "ready", then writes backups DIR/../bk-0, bk-1, ...,
// printing "B i" after backup i returns.
func TestBackupKilledChild(t *testing.T) {
	dir := os.Getenv(backupChildEnv)
	if dir == "" {
		return
	}
	o, err := StateOptions(dir)
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	e, err := Open(o)
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	for i := 0; ; i++ {
		if err := e.Backup(filepath.Join(filepath.Dir(dir), fmt.Sprintf("bk-%d", i))); err != nil {
			fmt.Printf("ERR %v\n", err)
			os.Exit(3)
		}
		fmt.Printf("B %d\n", i)
	}
}

// TestBackupKilled kills a process with SIGKILL while it writes backups,
// at a random moment: every backup under its final name, the one being
// written included, restores with every key; a partial one never appears
// under its name.
func TestBackupKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	const n = 20000
	rng := rand.New(rand.NewPCG(42, 0))
	for round := 0; round < 3; round++ {
		root := t.TempDir()
		o := backupState(t, root, n)
		cmd, stdout := startChild(t, "TestBackupKilledChild", backupChildEnv+"="+o.Dir)
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		if l := <-lines; l != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %q", l)
		}
		time.Sleep(time.Duration(5+rng.IntN(120)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		done := -1
		for l := range lines {
			if strings.HasPrefix(l, "ERR") {
				t.Fatalf("child: %s", l)
			}
			fmt.Sscanf(l, "B %d", &done)
		}
		// The backup being written when the kill came: absent, or whole.
		inProgress := filepath.Join(root, fmt.Sprintf("bk-%d", done+1))
		if _, err := os.Stat(inProgress); err == nil {
			checkRestored(t, inProgress, n, 101)
		}
		if done >= 0 {
			checkRestored(t, filepath.Join(root, fmt.Sprintf("bk-%d", done)), n, 101)
		}
		ents, _ := os.ReadDir(root)
		for _, de := range ents {
			if strings.HasPrefix(de.Name(), "bk-") && !strings.HasSuffix(de.Name(), "-restored") {
				if _, err := os.Stat(filepath.Join(root, de.Name(), BackupManifest)); err != nil {
					t.Errorf("round %d: %s under its final name lacks its manifest", round, de.Name())
				}
			}
		}
		t.Logf("round %d: killed after %d backups", round, done+1)
	}
}

// TestRestoreErrorsNameTheBackup: a backup that passes its manifest but
// does not verify (here its snapshot was removed, manifest and all) is
// called damaged, and the error names the backup's folder, not the scratch
// copy restore opened.
func TestRestoreErrorsNameTheBackup(t *testing.T) {
	root := t.TempDir()
	o := backupState(t, root, 100)
	e := openT(t, o)
	bk := filepath.Join(root, "bk")
	if err := e.Backup(bk); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(bk, SnapshotDir)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(bk, BackupManifest))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keep []any
	for _, f := range m["files"].([]any) {
		if !strings.HasPrefix(f.(map[string]any)["name"].(string), SnapshotDir+"/") {
			keep = append(keep, f)
		}
	}
	m["files"] = keep
	b, _ = json.Marshal(m)
	if err := os.WriteFile(filepath.Join(bk, BackupManifest), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = RestoreBackup(bk, filepath.Join(root, "r"))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "damaged backup") || !strings.Contains(err.Error(), bk) || strings.Contains(err.Error(), ".dedup-restore") {
		t.Fatalf("restore: %v", err)
	}
	t.Log(err)
}

// TestBackupKilledMidCopy kills a process with SIGKILL while a backup's
// files are being written (its partial folder is there): no backup
// appears under its final name without its manifest, the partial folder
// (.NAME.partial-PID-N, beside it) is refused by RestoreBackup as a backup
// that did not finish, and the next backup to the same name removes it
// and is whole.
func TestBackupKilledMidCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	const n = 20000
	for round := 0; ; round++ {
		if round == 10 {
			t.Fatal("in 10 rounds, no kill landed while a backup was being written")
		}
		root := t.TempDir()
		o := backupState(t, root, n)
		cmd, stdout := startChild(t, "TestBackupKilledChild", backupChildEnv+"="+o.Dir)
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %q", sc.Text())
		}
		partials := func() []string {
			m, _ := filepath.Glob(filepath.Join(root, ".bk-*.partial-*"))
			return m
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(partials()) == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		left := partials()
		if len(left) == 0 {
			continue // the backup was renamed between the look and the kill
		}
		ents, _ := os.ReadDir(root)
		for _, de := range ents {
			if strings.HasPrefix(de.Name(), "bk-") {
				if _, err := os.Stat(filepath.Join(root, de.Name(), BackupManifest)); err != nil {
					t.Fatalf("%s under its final name lacks its manifest", de.Name())
				}
			}
		}
		partial := left[0]
		if _, err := RestoreBackup(partial, filepath.Join(root, "from-partial")); !errors.Is(err, ErrNotBackup) || !strings.Contains(err.Error(), "did not finish") {
			t.Fatalf("restore of the partial %s: %v, want ErrNotBackup naming a backup that did not finish", partial, err)
		}
		if _, err := os.Stat(filepath.Join(root, "from-partial")); err == nil {
			t.Fatal("a refused restore left its destination")
		}
		name := strings.TrimPrefix(filepath.Base(partial), ".")
		name = name[:strings.Index(name, ".partial-")]
		e := openT(t, o)
		if err := e.Backup(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(partial); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the next backup to %s left the partial %s (%v)", name, partial, err)
		}
		checkRestored(t, filepath.Join(root, name), n, 101)
		t.Logf("round %d: killed while %s was written", round, filepath.Base(partial))
		return
	}
}
