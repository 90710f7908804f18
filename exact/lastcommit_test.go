package exact

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// dirBytes maps each file of dir to its bytes.
func dirBytes(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if de.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(dir, de.Name()))
			if err != nil {
				t.Fatal(err)
			}
			m[de.Name()] = b
		}
	}
	return m
}

// TestLastCommit: LastCommit reads the last commit of a closed store,
// those in its tables and those only in its commit log, without changing
// a byte; a cut commit log ends it where Open ends it; a store in use is
// refused.
func TestLastCommit(t *testing.T) {
	dir := t.TempDir()
	if n, err := LastCommit(t.TempDir(), Options{}); err == nil {
		t.Fatalf("LastCommit of an empty directory: %d, want an error", n)
	}
	// Commits of a store closed cleanly (which moves them into the tables).
	logged := t.TempDir()
	s := mustOpen(t, logged, Options{})
	for i := range 3 {
		commitRange(t, s, 1, i*10, i*10+10, nil)
	}
	mustClose(t, s)
	if n, err := LastCommit(logged, Options{}); err != nil || n != 3 {
		t.Fatalf("LastCommit of 3 logged commits: %d, %v", n, err)
	}
	s = mustOpen(t, dir, Options{memLimit: 1}) // every commit flushed
	for i := range 5 {
		commitRange(t, s, 1, i*10, i*10+10, nil)
	}
	mustClose(t, s)
	if n, err := LastCommit(dir, Options{}); err != nil || n != 5 {
		t.Fatalf("LastCommit of 5 flushed commits: %d, %v", n, err)
	}
	s = mustOpen(t, dir, Options{})
	for i := 5; i < 10; i++ {
		commitRange(t, s, 1, i*10, i*10+10, nil)
	}
	if _, err := LastCommit(dir, Options{}); err == nil {
		t.Fatal("LastCommit of a store in use: no error")
	}
	// What a crash leaves: the last 5 commits in the log only (a clean
	// Close moves them into the tables and empties the log).
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	dir = crashed
	before := dirBytes(t, dir)
	if n, err := LastCommit(dir, Options{}); err != nil || n != 10 {
		t.Fatalf("LastCommit of 5 flushed + 5 logged commits, crashed: %d, %v", n, err)
	}
	after := dirBytes(t, dir)
	if len(after) != len(before) {
		t.Fatalf("LastCommit changed the files: %d, then %d", len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("LastCommit changed %s", name)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, segPrefix+"[0-9]*"))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	if err := os.Truncate(segs[0], 100); err != nil {
		t.Fatal(err)
	}
	n, err := LastCommit(dir, Options{})
	if err != nil || n >= 10 || n < 5 {
		t.Fatalf("LastCommit of a cut log: %d, %v; want 5 to 9", n, err)
	}
	s = mustOpen(t, dir, Options{})
	defer mustClose(t, s)
	if got := s.CommitSeq(); got != n {
		t.Fatalf("Open says the last commit is %d, LastCommit %d", got, n)
	}
}

func TestCommitSpan(t *testing.T) {
	if got := CommitSpan(7, 7); got != "commit 7" {
		t.Errorf("CommitSpan(7, 7) = %q", got)
	}
	if got := CommitSpan(3, 10); got != "commits 3 to 10" {
		t.Errorf("CommitSpan(3, 10) = %q", got)
	}
}
