package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
