package snapshot

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FuzzRead decodes arbitrary bytes as a manifest and as a segment, directly
// and as the newest manifest of the golden directory. It must never panic;
// whatever decodes must re-encode to the same bytes; and Latest must fall
// back to the golden snapshot when the bytes are not a valid manifest.
func FuzzRead(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join("testdata", "v*", "*"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	golden := map[string][]byte{}
	dir := goldenDir(Version)
	ents, err := os.ReadDir(dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range ents {
		if golden[e.Name()], err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeManifest(b); err == nil {
			if re := encodeManifest(m.Header, m.Refs); !bytes.Equal(re, b) {
				t.Fatalf("manifest does not re-encode to its bytes")
			}
		} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("decodeManifest: %v is neither corrupt nor version", err)
		}
		if m, payload, _, err := decodeSegment(b); err == nil {
			if re := encodeSegment(m, payload); !bytes.Equal(re, b) {
				t.Fatalf("segment does not re-encode to its bytes")
			}
		} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("decodeSegment: %v is neither corrupt nor version", err)
		}

		fs := vfs.NewMem()
		if err := fs.MkdirAll(testDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, g := range golden {
			writeFile(t, fs, fs.PathJoin(testDir, name), g)
		}
		writeFile(t, fs, fs.PathJoin(testDir, manifestName(3)), b)
		s, err := Latest(fs, testDir)
		switch {
		case errors.Is(err, ErrVersion):
		case err != nil:
			t.Fatalf("Latest: %v", err)
		case fs.PathBase(s.Path) == manifestName(2):
			if len(s.Skipped) != 1 || !errors.Is(s.Skipped[0], ErrCorrupt) {
				t.Fatalf("skipped %v", s.Skipped)
			}
		case fs.PathBase(s.Path) != manifestName(3):
			t.Fatalf("Latest returned %s", s.Path)
		}
	})
}

// encodeSegment encodes a whole segment .
func encodeSegment(m meta, payload []byte) []byte {
	head := segmentHead(m, len(payload))
	b := append(head, payload...)
	return append(b, segmentTail(head, payload)...)
}
