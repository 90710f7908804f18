package dedup_test

import (
	"errors"
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

// TestForeignDirectoryKeepsModes: Open of a directory that is not a state
// (a script, a subdirectory) refuses it and changes no mode in it, and a
// state directory's existing parent keeps its mode.
func TestForeignDirectoryKeepsModes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	root := t.TempDir()
	foreign := filepath.Join(root, "home")
	modes := map[string]fs.FileMode{foreign: 0o755, filepath.Join(foreign, "sub"): 0o755,
		filepath.Join(foreign, "run.sh"): 0o755, filepath.Join(foreign, "sub", "notes.txt"): 0o644}
	for path, mode := range modes {
		if mode == 0o755 && filepath.Ext(path) == "" {
			if err := os.MkdirAll(path, mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	for path, mode := range modes {
		if filepath.Ext(path) != "" {
			if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, prob := range []bool{false, true} {
		if _, err := Open(Options{Dir: foreign, Probabilistic: prob}); !errors.Is(err, ErrNotOurs) {
			t.Fatalf("Open(%s, Probabilistic=%v) = %v, want ErrNotOurs", foreign, prob, err)
		}
	}
	for path, mode := range modes {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v after a refused Open, was %v", path, fi.Mode().Perm(), mode)
		}
	}
	// A new state under an existing directory: the parent keeps 0755.
	e := openT(t, Options{Dir: filepath.Join(root, "parent", "state")})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "parent"), 0o755); err != nil {
		t.Fatal(err)
	}
	e = openT(t, Options{Dir: filepath.Join(root, "parent", "state")})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{filepath.Join(root, "parent"): 0o755, filepath.Join(root, "parent", "state"): 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", path, fi.Mode().Perm(), err, want)
		}
	}
}
