package snapshot

import (
	"encoding/binary"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// goldenFS loads the current golden snapshot directory.
func goldenFS(t testing.TB) (*vfs.MemFS, map[string][]byte) {
	t.Helper()
	return loadDir(t, goldenDir(Version))
}

// readerOf returns the manifest whose Read covers file name.
func readerOf(t testing.TB, fs vfs.FS, name string) string {
	t.Helper()
	if _, ok := parseManifestName(name); ok {
		return fs.PathJoin(testDir, name)
	}
	for _, seq := range []uint64{2, 1} {
		p := fs.PathJoin(testDir, manifestName(seq))
		in, err := Inspect(fs, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, sg := range in.Segments {
			if sg.Name == name {
				return p
			}
		}
	}
	t.Fatalf("no manifest references %s", name)
	return ""
}

// damageEachGolden calls damage for each golden file, in name order, with
// its path, the manifest that reads it and its intact bytes; damage writes
// damaged copies at path, and the intact file is written back after it.
func damageEachGolden(t *testing.T, fs vfs.FS, files map[string][]byte, damage func(name, path, reader string, orig []byte)) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		path := fs.PathJoin(testDir, name)
		damage(name, path, readerOf(t, fs, name), files[name])
		writeFile(t, fs, path, files[name])
	}
}

// expectCorrupt checks that Read of the manifest at path rejects the damage
// with an error wrapping ErrCorrupt, not ErrVersion, and, if asked, that
// Verify and Inspect do too.
func expectCorrupt(t *testing.T, fs vfs.FS, path, what string, verify, inspect bool) {
	t.Helper()
	_, err := Read(fs, path)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion) {
		t.Fatalf("%s: Read: %v", what, err)
	}
	if !strings.HasPrefix(err.Error(), "snapshot: ") {
		t.Fatalf("%s: error %q lacks the package prefix", what, err)
	}
	if verify {
		if err := Verify(fs, path); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Verify: %v", what, err)
		}
	}
	if inspect {
		if _, err := Inspect(fs, path); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Inspect: %v", what, err)
		}
	}
}

// TestEveryByteFlip alters every byte of every golden file in every possible
// way: each is detected as corruption, never a panic.
func TestEveryByteFlip(t *testing.T) {
	fs, files := goldenFS(t)
	damageEachGolden(t, fs, files, func(name, path, reader string, orig []byte) {
		_, isManifest := parseManifestName(name)
		for i := range orig {
			for x := 1; x < 256; x++ {
				b := slices.Clone(orig)
				b[i] ^= byte(x)
				writeFile(t, fs, path, b)
				// Inspect skips payload checksums: check it on the manifest
				// and the segment framing only.
				inspect := isManifest || i < segHeadLen || i >= len(orig)-trailerLen
				expectCorrupt(t, fs, reader, name, x == 0xff, inspect && x == 0xff)
			}
		}
	})
}

// TestEveryTruncation cuts every golden file at every length, and appends a
// byte: each is detected as corruption.
func TestEveryTruncation(t *testing.T) {
	fs, files := goldenFS(t)
	damageEachGolden(t, fs, files, func(name, path, reader string, orig []byte) {
		for n := 0; n < len(orig); n++ {
			writeFile(t, fs, path, orig[:n])
			expectCorrupt(t, fs, reader, name, true, true)
		}
		writeFile(t, fs, path, append(slices.Clone(orig), 0))
		expectCorrupt(t, fs, reader, name, true, true)
	})
	// Without a manifest's segment, the snapshot is corrupt too.
	if err := fs.Remove(fs.PathJoin(testDir, "segment-000002-3-0.seg")); err != nil {
		t.Fatal(err)
	}
	expectCorrupt(t, fs, fs.PathJoin(testDir, manifestName(2)), "missing segment", true, true)
}

// setVersion rewrites the version in b's preamble, with a valid preamble
// checksum: an intact file of another version.
func setVersion(b []byte, v uint32) []byte {
	b = slices.Clone(b)
	binary.LittleEndian.PutUint32(b[8:], v)
	binary.LittleEndian.PutUint32(b[12:], checksum(b[:12]))
	return b
}

func TestNewerVersion(t *testing.T) {
	fs, files := goldenFS(t)
	m2 := fs.PathJoin(testDir, manifestName(2))
	writeFile(t, fs, m2, setVersion(files[manifestName(2)], Version+1))
	for _, err := range []error{
		func() error { _, err := Read(fs, m2); return err }(),
		Verify(fs, m2),
		func() error { _, err := Inspect(fs, m2); return err }(),
		// Latest does not silently fall back to an older snapshot when
		// the newest one is of a newer format.
		func() error { _, err := Latest(fs, testDir); return err }(),
	} {
		if !errors.Is(err, ErrVersion) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("newer manifest: %v", err)
		}
	}
	// Nor does Write proceed over it.
	if _, err := Write(fs, testDir, header(50), gens(specs1, nil)); !errors.Is(err, ErrVersion) {
		t.Fatalf("Write over a newer manifest: %v", err)
	}
	writeFile(t, fs, m2, files[manifestName(2)])

	seg := "segment-000002-3-0.seg"
	writeFile(t, fs, fs.PathJoin(testDir, seg), setVersion(files[seg], Version+1))
	if _, err := Read(fs, m2); !errors.Is(err, ErrVersion) {
		t.Fatalf("newer segment: %v", err)
	}
	// Version 0 was never written: corrupt.
	writeFile(t, fs, fs.PathJoin(testDir, seg), setVersion(files[seg], 0))
	expectCorrupt(t, fs, m2, "version 0 segment", true, true)
	writeFile(t, fs, m2, setVersion(files[manifestName(2)], 0))
	expectCorrupt(t, fs, m2, "version 0 manifest", true, true)
}

func TestForeignFiles(t *testing.T) {
	fs, files := goldenFS(t)
	m2 := fs.PathJoin(testDir, manifestName(2))
	seg := "segment-000002-3-0.seg"
	for _, tc := range []struct {
		name string
		file string
		b    []byte
	}{
		{"empty-manifest", manifestName(2), nil},
		{"text-manifest", manifestName(2), []byte("window = 1h\nshards = 4\n")},
		{"pebble-manifest", manifestName(2), append([]byte{0x8a, 0x3c, 0x11, 0x00, 0x01, 0x01}, make([]byte, 100)...)},
		{"segment-as-manifest", manifestName(2), files[seg]},
		{"manifest-as-segment", seg, files[manifestName(1)]},
		{"zeros-segment", seg, make([]byte, len(files[seg]))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fs.PathJoin(testDir, tc.file)
			writeFile(t, fs, p, tc.b)
			expectCorrupt(t, fs, m2, tc.name, true, true)
			writeFile(t, fs, p, files[tc.file])
		})
	}
}

// rawManifest builds a manifest from raw section bodies and length fields,
// with valid checksums everywhere: only the lengths lie.
func rawManifest(hlen uint32, hbody []byte, count, rlen uint32, rbody []byte) []byte {
	b := appendPreamble(nil, manifestMagic)
	b = binary.LittleEndian.AppendUint32(b, hlen)
	b = append(b, hbody...)
	b = binary.LittleEndian.AppendUint32(b, checksum(hbody))
	b = binary.LittleEndian.AppendUint32(b, count)
	b = binary.LittleEndian.AppendUint32(b, rlen)
	b = append(b, rbody...)
	b = binary.LittleEndian.AppendUint32(b, checksum(rbody))
	return binary.LittleEndian.AppendUint64(b, sum64(b))
}

// TestLyingLengths feeds manifests whose checksums are right but whose
// lengths and counts claim gigabytes: they are rejected without allocating.
func TestLyingLengths(t *testing.T) {
	hbody := func(optLen uint32, opts int) []byte {
		b := make([]byte, 24)
		b = binary.LittleEndian.AppendUint32(b, optLen)
		return append(b, make([]byte, opts)...)
	}
	ref := func(nameLen uint16, name string, size uint64) []byte {
		b := appendMeta(nil, meta{ID: 3, Shard: 0})
		b = binary.LittleEndian.AppendUint16(b, nameLen)
		b = append(b, name...)
		b = binary.LittleEndian.AppendUint64(b, size)
		return binary.LittleEndian.AppendUint64(b, 0)
	}
	okName := segmentName(2, 3, 0)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"header-length", rawManifest(1<<31, hbody(0, 0), 0, 0, nil)},
		{"options-length", rawManifest(28, hbody(1<<31, 0), 0, 0, nil)},
		{"options-over-limit", rawManifest(28+MaxOptionsSize+1, hbody(MaxOptionsSize+1, MaxOptionsSize+1), 0, 0, nil)},
		{"ref-count", rawManifest(28, hbody(0, 0), MaxSegments, 0, nil)},
		{"ref-count-over-limit", rawManifest(28, hbody(0, 0), 1<<31, 0, nil)},
		{"refs-length", rawManifest(28, hbody(0, 0), 1, 1<<31, ref(uint16(len(okName)), okName, 1<<20))},
		{"name-length", rawManifest(28, hbody(0, 0), 1, uint32(len(ref(0xffff, okName, 100))), ref(0xffff, okName, 100))},
		{"segment-size", rawManifest(28, hbody(0, 0), 1, uint32(len(ref(uint16(len(okName)), okName, 1<<60))), ref(uint16(len(okName)), okName, 1<<60))},
		{"bad-name", rawManifest(28, hbody(0, 0), 1, uint32(len(ref(7, "../etc1", 100))), ref(7, "../etc1", 100))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := goldenFS(t)
			p := fs.PathJoin(testDir, manifestName(2))
			writeFile(t, fs, p, tc.b)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Read(fs, p)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read: %v", err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
				t.Fatalf("rejecting it allocated %d bytes", got)
			}
		})
	}
	// A reference whose size is right for a segment that does not match it.
	fs, files := goldenFS(t)
	var seg []byte
	seg = append(seg, files["segment-000002-3-0.seg"]...)
	writeFile(t, fs, fs.PathJoin(testDir, "segment-000002-3-0.seg"), append(seg, make([]byte, 1<<10)...))
	expectCorrupt(t, fs, fs.PathJoin(testDir, manifestName(2)), "grown segment", true, true)
}
