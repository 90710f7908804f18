package dedup_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/snapshot"
)

// TestTruncatedCommitLogRefused pins that a commit log cut short under a
// snapshot that covers later commits is refused by name (the segment, the
// snapshot, the commits lost), leaves every file as it was, and opens
// only when the loss is accepted, which sets that snapshot aside: the
// engine used to open with the commits gone and overwrite the evidence.
func TestTruncatedCommitLogRefused(t *testing.T) {
	dir := t.TempDir()
	o := dedup.Options{Dir: dir, SnapshotInterval: -1}
	e, err := dedup.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	const commits, per = 10, 100
	for c := range commits {
		for i := range per {
			if v, err := e.Observe([]byte(fmt.Sprintf("k-%d-%d", c, i))); err != nil || v != dedup.New {
				t.Fatalf("Observe: %v %v", v, err)
			}
		}
		if err := e.Commit([]byte{byte(c)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// What a crash leaves: the commits in the log only (a clean Close
	// moves them into the tables and empties the log).
	dir = filepath.Join(t.TempDir(), "crashed")
	copyTree(t, o.Dir, dir)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	o.Dir = dir
	segs, _ := filepath.Glob(filepath.Join(dir, "exact-commits-[0-9]*"))
	if len(segs) != 1 {
		t.Fatalf("commit log segments %v, want one (the commits unflushed)", segs)
	}
	if err := os.Truncate(segs[0], 100); err != nil {
		t.Fatal(err)
	}
	snaps := func() map[string][]byte {
		m := map[string][]byte{}
		paths, _ := filepath.Glob(filepath.Join(dir, dedup.SnapshotDir, "*"))
		for _, p := range append(paths, segs[0]) {
			b, _ := os.ReadFile(p)
			m[p] = b
		}
		return m
	}
	before := snaps()
	for range 2 {
		_, err = dedup.Open(o)
		if !errors.Is(err, dedup.ErrLostCommits) || !errors.Is(err, dedup.ErrCorrupt) {
			t.Fatalf("Open of a cut commit log: %v, want ErrLostCommits", err)
		}
		for _, want := range []string{filepath.Base(segs[0]), "snapshot-", "commit 10", "commits 1 to 10"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		after := snaps()
		for p, b := range before {
			if !bytes.Equal(after[p], b) {
				t.Fatalf("refused Open changed %s", p)
			}
		}
		if _, err := dedup.StateOptions(dir); !errors.Is(err, dedup.ErrLostCommits) {
			t.Fatalf("StateOptions of a cut commit log: %v, want ErrLostCommits", err)
		}
	}
	a := o
	a.AcceptLostCommits = true
	e, err = dedup.Open(a)
	if err != nil {
		t.Fatalf("Open accepting the loss: %v", err)
	}
	st := e.Stats()
	if len(st.RestoreProblems) == 0 || !strings.Contains(strings.Join(st.RestoreProblems, "\n"), "accepted") {
		t.Errorf("restore problems %q, want the accepted loss", st.RestoreProblems)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	lost, _ := filepath.Glob(filepath.Join(dir, dedup.SnapshotDir, "*"+snapshot.LostSuffix))
	if len(lost) != 1 {
		t.Fatalf("set-aside snapshots %v, want one", lost)
	}
	e, err = dedup.Open(o)
	if err != nil {
		t.Fatalf("Open after the accepted loss: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
