package fspath

import (
	"os"
	"path/filepath"
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
