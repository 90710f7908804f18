package dedup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/snapshot"
)

// TestDamagedNewestSnapshotIsNotKept pins that after the newest snapshot
// is found damaged, the next snapshot keeps the newest good one as its
// fallback and removes the damaged one, so that every snapshot left
// verifies: the damaged one used to be kept and the good one deleted.
func TestDamagedNewestSnapshotIsNotKept(t *testing.T) {
	dir := t.TempDir()
	o := dedup.Options{Dir: dir, SnapshotInterval: -1}
	for run := range 2 {
		e, err := dedup.Open(o)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2000 {
			if _, err := e.Observe([]byte(fmt.Sprintf("k-%d-%d", run, i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Commit(nil); err != nil {
			t.Fatal(err)
		}
		if err := e.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	snapDir := filepath.Join(dir, dedup.SnapshotDir)
	ms, _ := filepath.Glob(filepath.Join(snapDir, "snapshot-*.manifest"))
	slices.Sort(ms)
	if len(ms) != 2 {
		t.Fatalf("manifests %v, want two", ms)
	}
	newest := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(ms[1]), "snapshot-"), ".manifest")
	segs, _ := filepath.Glob(filepath.Join(snapDir, "segment-"+newest+"-*.seg"))
	if len(segs) == 0 {
		t.Fatalf("no segment written by %s", ms[1])
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := dedup.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(snapDir, "snapshot-*.manifest"))
	if slices.Contains(left, ms[1]) || !slices.Contains(left, ms[0]) {
		t.Errorf("manifests left %v: want the good %s kept and the damaged %s removed", left, ms[0], ms[1])
	}
	for _, m := range left {
		if err := snapshot.Verify(vfs.Default, m); err != nil {
			t.Errorf("snapshot left damaged: %v", err)
		}
	}
}
