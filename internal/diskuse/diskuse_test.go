package diskuse

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBytesCountsAllocatedBlocks checks that space preallocated past a
// file's end counts (as du counts it) and that sub-directories are walked.
func TestBytesCountsAllocatedBlocks(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "a"), make([]byte, 100<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := vfs.Default.Create(filepath.Join(dir, "b"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Preallocate(0, 8<<20); err != nil {
		t.Skipf("this file system cannot preallocate: %v", err)
	}
	n, err := Bytes(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	// 100 KiB written plus 8 MiB preallocated in an empty file.
	if n < 8<<20+100<<10 || n > 9<<20 {
		t.Fatalf("Bytes = %d, want about %d", n, 8<<20+100<<10)
	}
}

// TestBytesMem checks that an in-memory file system counts lengths.
func TestBytesMem(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d/x", "d/e/y"} {
		f, err := fs.Create(p, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := Bytes(fs, "d"); err != nil || n != 2000 {
		t.Fatalf("Bytes = %d, %v; want 2000", n, err)
	}
}
