package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestFilterInMemoryCommitsOften: without --state, and without
// --commit-every, a run commits every memCommitEvery events (the keys
// between commits take memory, and a commit in memory no fsync); an
// explicit --commit-every is kept.
func TestFilterInMemoryCommitsOften(t *testing.T) {
	var in strings.Builder
	const lines = 3*memCommitEvery + 100
	for i := range lines {
		fmt.Fprintf(&in, "k%d\n", i)
	}
	commits := func(args ...string) int {
		t.Helper()
		code, out, stderr := runCmd(t, in.String(), append([]string{"filter", "--format", "lines", "--stats", "--commit-interval", "1h"}, args...)...)
		if code != 0 || strings.Count(out, "\n") != lines {
			t.Fatalf("exit %d, %d lines out of %d: %s", code, strings.Count(out, "\n"), lines, stderr)
		}
		m := regexp.MustCompile(`(?m)^commits +(\d+)`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("no commits line in --stats: %s", stderr)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if n := commits(); n < 3 {
		t.Fatalf("%d commits of %d lines without --state, want at least 3 (every %d)", n, lines, memCommitEvery)
	}
	if n := commits("--commit-every", "1000000"); n > 1 {
		t.Fatalf("%d commits with --commit-every 1000000, want 1 (at the end)", n)
	}
}
