package dedup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/streamdedup/dedup"
)

// TestBackupOutlivesLaterSnapshots: a linked backup (BackupOptions.Link)
// shares its snapshot's files with the live state; the live state's later snapshots,
// which delete the files they no longer need, leave the backup whole, and
// it restores every key committed before it from its snapshot.
func TestBackupOutlivesLaterSnapshots(t *testing.T) {
	root := t.TempDir()
	o := Options{Dir: filepath.Join(root, "live"), Shards: 2}
	e := openT(t, o)
	observe := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := e.Observe(fmt.Appendf(nil, "key%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Commit(fmt.Appendf(nil, "%d", to)); err != nil {
			t.Fatal(err)
		}
	}
	observe(0, 1000)
	backup := filepath.Join(root, "backup")
	if err := e.BackupWith(backup, BackupOptions{Link: true}); err != nil {
		t.Fatal(err)
	}
	// Linked, not copied: the snapshot's files are shared.
	ents, err := os.ReadDir(filepath.Join(backup, SnapshotDir))
	if err != nil || len(ents) == 0 {
		t.Fatalf("backup snapshot: %v, %d files", err, len(ents))
	}
	for _, de := range ents {
		a, err1 := os.Stat(filepath.Join(backup, SnapshotDir, de.Name()))
		b, err2 := os.Stat(filepath.Join(o.Dir, SnapshotDir, de.Name()))
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			t.Fatalf("backup's %s is not the live state's file (%v, %v)", de.Name(), err1, err2)
		}
	}
	for r := 1; r <= 4; r++ {
		observe(1000*r, 1000*(r+1))
		if err := e.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// The live state no longer holds any file of the backup's snapshot.
	ents, err = os.ReadDir(filepath.Join(backup, SnapshotDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if _, err := os.Stat(filepath.Join(o.Dir, SnapshotDir, de.Name())); err == nil {
			t.Fatalf("live state still holds %s: the later snapshots did not replace the backup's", de.Name())
		}
	}
	ro, err := RestoreBackup(backup, filepath.Join(root, "restored"))
	if err != nil {
		t.Fatal(err)
	}
	r := openT(t, ro)
	if st := r.Stats(); st.RestoredFrom != RestoredSnapshot {
		t.Fatalf("backup opened from %q (%v)", st.RestoredFrom, st.RestoreProblems)
	}
	if cp := string(r.Checkpoint()); cp != "1000" {
		t.Fatalf("checkpoint %q, want 1000", cp)
	}
	for i := range 1000 {
		if v, err := r.Peek(fmt.Appendf(nil, "key%d", i)); err != nil || v != Duplicate {
			t.Fatalf("key%d: %v, %v", i, v, err)
		}
	}
	if v, err := r.Peek([]byte("key1000")); err != nil || v != New {
		t.Fatalf("key1000, committed after the backup: %v, %v", v, err)
	}
}
