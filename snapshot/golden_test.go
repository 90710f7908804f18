package snapshot

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

var update = flag.Bool("update", false, "rewrite the golden files of the current format version in testdata/")

// The golden history: two Writes, the second reusing final segments of the
// first, so the golden directory holds two manifests and shared segments.
// Small payloads keep the every-byte corruption tests fast.
var (
	goldenSpecs1 = []spec{
		{ID: 1, Shards: 2, Count: 10, Final: true, Size: 40},
		{ID: 2, Shards: 2, Count: 5, Final: false, Size: 24},
	}
	goldenSpecs2 = []spec{
		{ID: 1, Shards: 2, Count: 10, Final: true, Size: 40},
		{ID: 2, Shards: 2, Count: 12, Final: true, Size: 56},
		{ID: 3, Shards: 2, Count: 1, Final: false, Size: 16},
	}
)

func goldenDir(v uint32) string { return filepath.Join("testdata", fmt.Sprintf("v%d", v)) }

// writeGolden replays the golden history into a new MemFS.
func writeGolden(t testing.TB) *vfs.MemFS {
	fs := vfs.NewMem()
	mustWrite(t, fs, header(41), goldenSpecs1, nil)
	mustWrite(t, fs, header(42), goldenSpecs2, nil)
	return fs
}

// loadDir copies a directory of the real filesystem into testDir of a new
// MemFS, so tests never modify testdata.
func loadDir(t testing.TB, dir string) (*vfs.MemFS, map[string][]byte) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fs := vfs.NewMem()
	if err := fs.MkdirAll(testDir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
		writeFile(t, fs, fs.PathJoin(testDir, e.Name()), b)
	}
	return fs, files
}

// TestGoldenCurrent checks that Write still produces, byte for byte, the
// golden files of the current version: a change to the encoding must come
// with a new Version (and a new testdata directory), not silently. Run with
// -update to regenerate them.
func TestGoldenCurrent(t *testing.T) {
	fs := writeGolden(t)
	dir := goldenDir(Version)
	names := listDir(t, fs, testDir)
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(dir, name), readFile(t, fs, fs.PathJoin(testDir, name)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, golden := loadDir(t, dir)
	if len(golden) != len(names) {
		t.Fatalf("golden files %d, written %d: %v", len(golden), len(names), names)
	}
	for _, name := range names {
		if !bytes.Equal(golden[name], readFile(t, fs, fs.PathJoin(testDir, name))) {
			t.Errorf("%s differs from %s: the format changed; bump Version or run go test -update", name, dir)
		}
	}
}

// TestGoldenLoads reads the snapshots of every format version kept in
// testdata: an old snapshot must keep loading.
func TestGoldenLoads(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "v*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden directories: %v", err)
	}
	for v := uint32(1); v <= Version; v++ {
		if !slices.Contains(dirs, goldenDir(v)) {
			t.Errorf("no golden files for version %d", v)
		}
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var v uint32
			if _, err := fmt.Sscanf(filepath.Base(dir), "v%d", &v); err != nil {
				t.Fatal(err)
			}
			fs, _ := loadDir(t, dir)
			s, err := Latest(fs, testDir)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshotVersion(t, s, v, header(42), goldenSpecs2)
			if fs.PathBase(s.Path) != manifestName(2) || len(s.Skipped) != 0 {
				t.Fatalf("Latest returned %s, skipped %v", s.Path, s.Skipped)
			}
			s, err = Read(fs, fs.PathJoin(testDir, manifestName(1)))
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshotVersion(t, s, v, header(41), goldenSpecs1)
			for _, seq := range []uint64{1, 2} {
				if err := Verify(fs, fs.PathJoin(testDir, manifestName(seq))); err != nil {
					t.Fatal(err)
				}
			}
			in, err := Inspect(fs, fs.PathJoin(testDir, manifestName(2)))
			if err != nil {
				t.Fatal(err)
			}
			if in.Version != v || in.CommitSeq != 42 || len(in.Segments) != 6 {
				t.Fatalf("Inspect: %+v", in)
			}
		})
	}
}
