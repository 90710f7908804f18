package dedup_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/streamdedup/dedup"
)

// checkPrivate fails t unless every directory under dir (dir too) is 0700
// and every file 0600.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("%s holds %d entries", dir, n)
	}
}

// TestStateIsPrivate: under a umask that lets everyone read, a state
// directory, its backup and a restored copy are 0700 with files 0600; a
// state written with open modes is made private when opened.
func TestStateIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprintf("prob=%v", prob), func(t *testing.T) {
			root := t.TempDir()
			o := Options{Dir: filepath.Join(root, "state"), Probabilistic: prob}
			e := openT(t, o)
			for i := range 100 {
				if _, err := e.Observe([]byte(fmt.Sprint("key", i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Commit([]byte("cp")); err != nil {
				t.Fatal(err)
			}
			if err := e.Snapshot(); err != nil {
				t.Fatal(err)
			}
			backup := filepath.Join(root, "backup")
			if err := e.Backup(backup); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			checkPrivate(t, o.Dir)
			checkPrivate(t, backup)
			restored := filepath.Join(root, "restored")
			if _, err := RestoreBackup(backup, restored); err != nil {
				t.Fatal(err)
			}
			checkPrivate(t, restored)
			// Modes opened up by hand (or by a copy) are closed again.
			if err := filepath.WalkDir(o.Dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() {
					return os.Chmod(path, 0o777)
				}
				return os.Chmod(path, 0o666)
			}); err != nil {
				t.Fatal(err)
			}
			e = openT(t, o)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			checkPrivate(t, o.Dir)
		})
	}
}
