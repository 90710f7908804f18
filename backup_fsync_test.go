package dedup_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// syncCounter is an errorfs injector that records every fsync (of a file
// or a directory) and fails the failAt-th one (1-based; 0 fails none).
type syncCounter struct {
	failAt int
	mu     sync.Mutex
	n      int
	paths  []string
}

var errSync = errors.New("injected fsync failure")

func (c *syncCounter) String() string { return "sync counter" }

func (c *syncCounter) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.paths = append(c.paths, op.Path)
	if c.n == c.failAt {
		return errSync
	}
	return nil
}

// treeBytes maps every file under dir (slash-separated, relative) to its
// bytes, and every directory to nil.
func treeBytes(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			m[rel+"/"] = nil
			return nil
		}
		b, err := os.ReadFile(p)
		m[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRestoreFsyncs: a restore fsyncs every file it installs and every
// directory of the new state, and dst's parent after the rename; a
// failure injected at each of its fsyncs in turn (its own and those of
// the engine that verifies the copy) fails the restore with that error,
// leaves no dst (nor an empty dst changed), no scratch folder, and the
// backup as it was.
func TestRestoreFsyncs(t *testing.T) {
	root := t.TempDir()
	o := backupState(t, root, 2000)
	e := openT(t, o)
	bk := filepath.Join(root, "bk")
	if err := e.Backup(bk); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	want := treeBytes(t, bk)
	fsFor := func(c *syncCounter) vfs.FS { return errorfs.Wrap(fsperm.FS(vfs.Default), c) }

	// A clean run: count the fsyncs, and check that each file and
	// directory of the restored state was fsynced (under the scratch name
	// it was written at), and the parent after the rename.
	clean := &syncCounter{}
	parent := filepath.Join(root, "clean")
	dst := filepath.Join(parent, "dst")
	if _, err := RestoreBackupFS(fsFor(clean), bk, dst); err != nil {
		t.Fatal(err)
	}
	if clean.paths[len(clean.paths)-1] != parent {
		t.Errorf("the last fsync is of %s, want dst's parent %s", clean.paths[len(clean.paths)-1], parent)
	}
	synced := map[string]bool{}
	for _, p := range clean.paths {
		if i := strings.Index(p, string(filepath.Separator)+"state"); strings.Contains(p, ".dedup-restore-") && i >= 0 {
			p = dst + p[i+len("/state"):]
		}
		synced[p] = true
	}
	for rel := range treeBytes(t, dst) {
		p := filepath.Join(dst, strings.TrimSuffix(rel, "/"))
		if filepath.Base(p) == "LOCK" {
			continue // a lock file holds nothing
		}
		if !synced[p] {
			t.Errorf("restore never fsynced %s", p)
		}
	}
	t.Logf("a restore fsyncs %d times", clean.n)

	for k := 1; ; k++ {
		c := &syncCounter{failAt: k}
		parent := filepath.Join(root, "fail", fmt.Sprint(k))
		dst := filepath.Join(parent, "dst")
		if k%2 == 0 {
			// An empty dst stays, empty.
			if err := os.MkdirAll(dst, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		_, err := RestoreBackupFS(fsFor(c), bk, dst)
		if c.n < k {
			if err != nil {
				t.Fatalf("restore with no fsync failed (%d fsyncs): %v", c.n, err)
			}
			if k < clean.n/2 {
				t.Fatalf("only %d fsyncs tried, a clean restore makes %d", k, clean.n)
			}
			break
		}
		if !errors.Is(err, errSync) {
			t.Fatalf("fsync %d (%s) failed: restore says %v, want the injected error", k, c.paths[k-1], err)
		}
		ents, rerr := os.ReadDir(parent)
		if rerr != nil {
			t.Fatal(rerr)
		}
		for _, de := range ents {
			if de.Name() != "dst" {
				t.Errorf("fsync %d (%s) failed: restore left %s", k, c.paths[k-1], de.Name())
				continue
			}
			if k%2 == 1 {
				t.Errorf("fsync %d (%s) failed: dst exists", k, c.paths[k-1])
			} else if in, _ := os.ReadDir(dst); len(in) > 0 {
				t.Errorf("fsync %d (%s) failed: dst holds %d entries", k, c.paths[k-1], len(in))
			}
		}
		if k%2 == 0 && !dirExists(dst) {
			t.Errorf("fsync %d (%s) failed: the empty dst is gone", k, c.paths[k-1])
		}
		got := treeBytes(t, bk)
		for p, b := range want {
			if g, ok := got[p]; !ok || !bytes.Equal(g, b) {
				t.Fatalf("fsync %d failed: the backup's %s changed", k, p)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("fsync %d failed: the backup holds %d entries, had %d", k, len(got), len(want))
		}
	}
	checkRestored(t, bk, 2000, 13)
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
