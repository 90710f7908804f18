package main

import (
	"strings"
	"testing"
)

// TestFuseFlagErrors: the errors of --filter fuse named the library's
// options ("fuse needs a Dir", "Filter fuse at FalsePositiveRate 1e-09"),
// which a user of the command never sees; they name the flags now, with
// exit status 2.
func TestFuseFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		notWant []string
	}{
		{[]string{"--filter", "fuse"}, []string{"--filter", "--state DIR"}, []string{"Dir", "Filter fuse"}},
		{[]string{"--filter", "fuse", "--probabilistic"}, []string{"--filter", "--state DIR"}, []string{"Dir"}},
		{[]string{"--filter", "fuse", "--state", "STATE", "--fp", "1e-9"}, []string{"--generations", "--filter fuse", "--fp 1e-09"}, []string{"FalsePositiveRate", "Filter fuse"}},
	} {
		args := append([]string{"filter", "--key", "id"}, tc.args...)
		for i, a := range args {
			if a == "STATE" {
				args[i] = t.TempDir() + "/state"
			}
		}
		code, stdout, stderr := runCmd(t, `{"id":1}`+"\n", args...)
		if code != exitBad || stdout != "" {
			t.Errorf("%v: exit %d (out %q), want %d: %s", tc.args, code, stdout, exitBad, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: %q does not name %s", tc.args, stderr, w)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(stderr, w) {
				t.Errorf("%v: %q names the library's %s", tc.args, stderr, w)
			}
		}
	}
}
