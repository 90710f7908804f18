package fspath

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestInside(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	if err := os.MkdirAll(filepath.Join(state, "snapshots"), 0o700); err != nil {
		t.Fatal(err)
	}
	// link -> state: a path through it is inside state.
	if err := os.Symlink(state, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    string
		want bool
	}{
		{state, true},
		{filepath.Join(state, "bk"), true},                        // does not exist
		{filepath.Join(state, "snapshots", "x", "y"), true},       // deeper, absent
		{filepath.Join(root, "link", "bk"), true},                 // through a link
		{filepath.Join(root, "other", "..", "state", "bk"), true}, // through ..
		{filepath.Join(root, "state-bk"), false},                  // a name sharing the prefix
		{filepath.Join(root, "bk"), false},                        // beside it
		{root, false},                                             // its parent
		{filepath.Join(state, "..", "state2"), false},             // out through ..
		{filepath.Join(root, "link", "..", "bk"), false},          // lexically out of the link
	} {
		got, err := Inside(state, tc.p)
		if err != nil || got != tc.want {
			t.Errorf("Inside(%s, %s) = %v, %v; want %v", state, tc.p, got, err, tc.want)
		}
	}
	// Relative paths are taken from the working directory.
	t.Chdir(root)
	if got, err := Inside("state", "state/bk"); err != nil || !got {
		t.Errorf("Inside(state, state/bk) = %v, %v", got, err)
	}
	if got, err := Inside("state", "bk"); err != nil || got {
		t.Errorf("Inside(state, bk) = %v, %v", got, err)
	}
}

func TestReal(t *testing.T) {
	root := t.TempDir()
	rroot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		filepath.Join(root, "a"):                 filepath.Join(rroot, "a"),
		filepath.Join(root, "l"):                 filepath.Join(rroot, "a"),
		filepath.Join(root, "l", "new", "x"):     filepath.Join(rroot, "a", "new", "x"),
		filepath.Join(root, "missing", "x"):      filepath.Join(rroot, "missing", "x"),
		filepath.Join(root, "a", ".", "b", ".."): filepath.Join(rroot, "a"),
	} {
		got, err := Real(p)
		if err != nil || got != want {
			t.Errorf("Real(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		dir, p string
		want   bool
	}{
		{"/a", "/a", true},
		{"/a", "/a/b", true},
		{"/a", "/ab", false},
		{"/a", "/", false},
		{"/a/b", "/a", false},
		{"/a", "/a/..b", true}, // a name starting with two dots is inside
	} {
		if got := Under(tc.dir, tc.p); got != tc.want {
			t.Errorf("Under(%s, %s) = %v, want %v", tc.dir, tc.p, got, tc.want)
		}
	}
}

// TestPartial: a partial folder's name is recognised, and StalePartials
// lists those of dest whose process is gone, not this process's, not a
// live one's, not another destination's.
func TestPartial(t *testing.T) {
	root := t.TempDir()
	dest := filepath.Join(root, "bk")
	mine := Partial(dest)
	if !IsPartial(mine) || filepath.Dir(mine) != root || !strings.HasPrefix(filepath.Base(mine), ".bk.partial-") {
		t.Fatalf("Partial(%s) = %s", dest, mine)
	}
	for _, p := range []string{dest, filepath.Join(root, ".bk"), filepath.Join(root, ".bk.partial-x-1"), filepath.Join(root, ".partial-12-1")} {
		if IsPartial(p) {
			t.Errorf("IsPartial(%s) = true", p)
		}
	}
	// A process that ran and was reaped.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(root, fmt.Sprintf(".bk.partial-%d-1", cmd.Process.Pid))
	deadOther := filepath.Join(root, fmt.Sprintf(".other.partial-%d-1", cmd.Process.Pid))
	live := filepath.Join(root, fmt.Sprintf(".bk.partial-%d-1", os.Getppid()))
	for _, d := range []string{mine, dead, deadOther, live} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	got, err := StalePartials(dest)
	if err != nil || len(got) != 1 || got[0] != dead {
		t.Fatalf("StalePartials = %v, %v; want [%s]", got, err, dead)
	}
	if got, err := StalePartials(filepath.Join(root, "absent", "bk")); err != nil || len(got) != 0 {
		t.Fatalf("StalePartials beside a missing folder = %v, %v", got, err)
	}
}
