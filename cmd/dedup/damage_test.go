package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/exact"
)

// corruptTableState makes a state of n distinct lines whose keys are in
// the store's tables (a backup flushes them), flips a byte in the middle
// of its largest table, and returns the state, the table's base name and
// the lines.
func corruptTableState(t *testing.T, n int) (state, table, lines string) {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "event-%08d\n", i)
	}
	lines = b.String()
	src := makeState(t, dir, lines)
	state = filepath.Join(dir, "backup")
	if code, _, stderr := runCmd(t, "", "backup", src, state); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	return state, flipByte(t, filepath.Join(state, "*.sst")), lines
}

// runWithin runs dedup with args and fails the test if it does not end
// within d: a hang is a failure, not a stuck test binary.
func runWithin(t *testing.T, d time.Duration, stdin string, args ...string) (int, string, string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := runCmd(t, stdin, args...)
		done <- result{code, stdout, stderr}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(d):
		t.Fatalf("dedup %v did not end within %v", args, d)
		return 0, "", ""
	}
}

// TestCorruptTableFailsLoudly pins that a damaged table block ends `dedup
// filter` with exit 1 and an error naming the table, within seconds (its
// deferred Close used to wait for ever on the shard lock that the
// panicking lookup held), and that `dedup snapshot rebuild` names the
// table too instead of panicking.
func TestCorruptTableFailsLoudly(t *testing.T) {
	state, table, lines := corruptTableState(t, 20000)
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	writeFile(t, in, lines)
	code, _, stderr := runWithin(t, 30*time.Second, "", "filter", "--format", "lines", "--state", state, "--in", in, "--out", filepath.Join(dir, "out"))
	if code != 1 || !strings.Contains(stderr, table) || !strings.Contains(stderr, "corrupt") {
		t.Fatalf("filter on a damaged table: exit %d, stderr %q; want exit 1 naming %s as corrupt", code, stderr, table)
	}
	code, _, stderr = runWithin(t, 30*time.Second, "", "snapshot", "rebuild", state)
	if code != 1 || !strings.Contains(stderr, table) || !strings.Contains(stderr, "corrupt") {
		t.Fatalf("snapshot rebuild of a damaged table: exit %d, stderr %q; want exit 1 naming %s as corrupt", code, stderr, table)
	}
}

// TestCheckAndRestoreRefuseDamagedTable pins that `dedup check` reads
// every table block (a good backup passes, one with a flipped byte fails
// naming the table) and that `dedup restore` runs that check before it
// says verified: it used to install such a backup as "(verified)".
func TestCheckAndRestoreRefuseDamagedTable(t *testing.T) {
	state, table, _ := corruptTableState(t, 20000)
	code, _, stderr := runWithin(t, 30*time.Second, "", "check", state)
	if code != 1 || !strings.Contains(stderr, table) || !strings.Contains(stderr, "corrupt") || strings.Contains(stderr, "check: dedup: check") {
		t.Fatalf("check of a damaged table: exit %d, stderr %q; want exit 1 naming %s (\"check\" once)", code, stderr, table)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	code, stdout, stderr := runWithin(t, 30*time.Second, "", "restore", state, dst)
	if code != 1 || !strings.Contains(stderr, table) || strings.Contains(stdout, "verified") {
		t.Fatalf("restore of a damaged table: exit %d, stdout %q, stderr %q; want exit 1 naming %s", code, stdout, stderr, table)
	}
	good := makeState(t, t.TempDir(), "a\nb\nc\n")
	bk := filepath.Join(t.TempDir(), "bk")
	if code, _, stderr := runCmd(t, "", "backup", good, bk); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := runCmd(t, "", "check", bk); code != 0 || !strings.HasPrefix(stdout, "ok ") {
		t.Fatalf("check of a good backup: exit %d, %q %q", code, stdout, stderr)
	}
}

// TestRepairAcceptsLostCommits pins that a state whose commit log was cut
// short under its snapshot is refused by `dedup stats` (exit 1, naming
// the commits lost) until `dedup repair` accepts the loss, which keeps
// the snapshot as *.manifest.lost.
func TestRepairAcceptsLostCommits(t *testing.T) {
	state := crashedState(t, "a", "b", "c")
	segs, _ := filepath.Glob(filepath.Join(state, "exact-commits-[0-9]*"))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	if err := os.Truncate(segs[0], 10); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, "", "stats", state)
	if code != 1 || !strings.Contains(stderr, "commits lost") || !strings.Contains(stderr, "dedup repair") {
		t.Fatalf("stats of a cut commit log: exit %d, %q; want exit 1 naming the loss and dedup repair", code, stderr)
	}
	code, stdout, stderr := runCmd(t, "", "repair", state)
	if code != 0 || !strings.Contains(stdout, "accepted") || !strings.Contains(stdout, ".lost") {
		t.Fatalf("repair: exit %d, %q %q", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, "", "stats", state); code != 0 {
		t.Fatalf("stats after repair: exit %d, %q", code, stderr)
	}
}

// TestRestoreRebuildsDamagedSnapshot pins that an exact backup whose
// snapshot is damaged restores, its filters rebuilt from its store (every
// key still a duplicate), instead of being refused.
func TestRestoreRebuildsDamagedSnapshot(t *testing.T) {
	dir := t.TempDir()
	src := makeState(t, dir, "a\nb\nc\n")
	bk := filepath.Join(dir, "bk")
	if code, _, stderr := runCmd(t, "", "backup", src, bk); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	flipByte(t, filepath.Join(bk, "snapshots", "segment-*.seg"))
	dst := filepath.Join(dir, "restored")
	if code, stdout, stderr := runCmd(t, "", "restore", bk, dst); code != 0 {
		t.Fatalf("restore of a damaged snapshot: exit %d, %q %q; want a rebuild from the store", code, stdout, stderr)
	}
	if out := filterLines(t, dst, "a\nb\nc\nd\n"); out != "d\n" {
		t.Fatalf("restored state passes %q, want only the new key d", out)
	}
}

// TestVerifyNamesLostCommits pins that `dedup snapshot verify` of a state
// whose commit log was cut short under its snapshot calls that snapshot
// INVALID, naming the commit it covers and the store's last commit (its
// checksums alone are good), and that `dedup backup` refuses the state
// instead of backing up what the store lost.
func TestVerifyNamesLostCommits(t *testing.T) {
	state := crashedState(t, "a", "b", "c")
	if code, stdout, stderr := runCmd(t, "", "snapshot", "verify", state); code != 0 || !strings.HasPrefix(stdout, "ok ") {
		t.Fatalf("verify of a whole state: exit %d, %q %q", code, stdout, stderr)
	}
	last, err := dedup.LastCommit(state)
	if err != nil || last == 0 {
		t.Fatalf("LastCommit of a whole state: %d, %v", last, err)
	}
	// In use, the snapshots still verify, with a note that the store was
	// not compared.
	busy := makeState(t, t.TempDir(), "a\nb\n")
	o, err := dedup.StateOptions(busy)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := dedup.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, "", "snapshot", "verify", busy)
	if cerr := eng.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	if code != 0 || !strings.Contains(stdout, "a running process holds it") || !strings.Contains(stdout, "ok ") {
		t.Fatalf("verify of a state in use: exit %d, %q %q; want ok and a note", code, stdout, stderr)
	}
	segs, _ := filepath.Glob(filepath.Join(state, "exact-commits-[0-9]*"))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	if err := os.Truncate(segs[0], 10); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCmd(t, "", "snapshot", "verify", state)
	want := []string{"INVALID", fmt.Sprintf("covers commit %d", last), "past the store's last commit 0", "dedup repair"}
	for _, w := range want {
		if code != 1 || !strings.Contains(stdout, w) {
			t.Fatalf("verify of a state that lost commits 1 to %d: exit %d, stdout %q, stderr %q; want exit 1 and %q", last, code, stdout, stderr, w)
		}
	}
	// The snapshots folder alone names the same loss (its state is found).
	if code, stdout, _ := runCmd(t, "", "snapshot", "verify", filepath.Join(state, dedup.SnapshotDir)); code != 1 || !strings.Contains(stdout, "past the store's last commit 0") {
		t.Fatalf("verify of the snapshots folder: exit %d, %q", code, stdout)
	}
	bk := filepath.Join(t.TempDir(), "bk")
	code, _, stderr = runCmd(t, "", "backup", state, bk)
	if code != 1 || !strings.Contains(stderr, "commits lost") || !strings.Contains(stderr, "lost "+exact.CommitSpan(1, last)+",") {
		t.Fatalf("backup of a state that lost commits: exit %d, %q; want exit 1 naming them", code, stderr)
	}
	if _, err := os.Stat(bk); err == nil {
		t.Fatal("a refused backup left its destination")
	}
}

// TestBackupCopyFlag pins that `dedup backup --copy` (the default said
// explicitly, as an operator reads "offer --copy") writes a backup that
// shares no file with the state, and that --copy with --link is a usage
// error rather than one of them silently winning.
func TestBackupCopyFlag(t *testing.T) {
	dir := t.TempDir()
	src := makeState(t, dir, "a\nb\nc\n")
	bk := filepath.Join(dir, "bk")
	if code, _, stderr := runCmd(t, "", "backup", "--copy", src, bk); code != 0 {
		t.Fatalf("backup --copy: exit %d: %s", code, stderr)
	}
	ents, _ := os.ReadDir(bk)
	for _, de := range ents {
		a, err1 := os.Stat(filepath.Join(bk, de.Name()))
		b, err2 := os.Stat(filepath.Join(src, de.Name()))
		if err1 == nil && err2 == nil && os.SameFile(a, b) {
			t.Errorf("backup --copy shares %s with the state", de.Name())
		}
	}
	code, _, stderr := runCmd(t, "", "backup", "--copy", "--link", src, filepath.Join(dir, "bk2"))
	if code != 2 || !strings.Contains(stderr, "--copy and --link") {
		t.Fatalf("backup --copy --link: exit %d, %q; want usage error 2", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "check", bk); code != 0 {
		t.Fatalf("check of the backup: exit %d, %q", code, stderr)
	}
}

// crashedState returns a state directory as a crash leaves it: keys
// observed and committed, a snapshot written, the commits in the commit
// log only (a clean Close moves them into the tables and empties the log).
func crashedState(t *testing.T, keys ...string) string {
	t.Helper()
	o := dedup.Options{Dir: filepath.Join(t.TempDir(), "live"), SnapshotInterval: -1}
	e, err := dedup.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if v, err := e.Observe([]byte(k)); err != nil || v != dedup.New {
			t.Fatalf("Observe(%q): %v, %v", k, v, err)
		}
		if err := e.Commit([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := os.CopyFS(state, os.DirFS(o.Dir)); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return state
}
