package dedup_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/snapshot"
)

// TestCorruptionIsOneClass checks that corruption reported by every layer
// matches dedup.ErrCorrupt, and still its own layer's sentinel alone.
func TestCorruptionIsOneClass(t *testing.T) {
	layers := map[string]error{
		"filter":   filter.ErrCorrupt,
		"exact":    exact.ErrCorrupt,
		"snapshot": snapshot.ErrCorrupt,
	}
	for name, sentinel := range layers {
		if !errors.Is(sentinel, dedup.ErrCorrupt) {
			t.Errorf("%s.ErrCorrupt does not match dedup.ErrCorrupt", name)
		}
		for other, o := range layers {
			if other != name && errors.Is(sentinel, o) {
				t.Errorf("%s.ErrCorrupt matches %s.ErrCorrupt", name, other)
			}
		}
	}

	check := func(layer string, err error, own error) {
		t.Helper()
		if !errors.Is(err, dedup.ErrCorrupt) || (own != nil && !errors.Is(err, own)) {
			t.Errorf("%s: %v: want an error matching dedup.ErrCorrupt and its layer's sentinel", layer, err)
		}
	}

	_, err := filter.Unmarshal([]byte("not a filter"))
	check("filter", err, filter.ErrCorrupt)

	fs := vfs.NewMem()
	f, err := fs.Create("junk.snap", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("not a snapshot, not at all")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = snapshot.Read(fs, "junk.snap")
	check("snapshot", err, snapshot.ErrCorrupt)

	// An exact store whose format marker names an unknown format.
	db, err := pebble.Open("store", &pebble.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("\x00dedup-exact"), []byte{99}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = exact.Open("store", exact.Options{FS: fs})
	check("exact", err, exact.ErrCorrupt)

	// The engine's own metadata: a malformed hash seed.
	e, err := dedup.Open(dedup.Options{Dir: "state", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := exact.Open("state", exact.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetMeta("seed", []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = dedup.Open(dedup.Options{Dir: "state", FS: fs})
	check("engine", err, nil)
}

// TestErrorPrefixOnce checks that an error wrapped inside the package
// carries the "dedup: " prefix once.
func TestErrorPrefixOnce(t *testing.T) {
	e, err := dedup.Open(dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	err = e.ObserveBatch([][]byte{[]byte("a"), nil}, make([]dedup.Verdict, 2))
	if !errors.Is(err, dedup.ErrEmptyKey) || strings.Count(err.Error(), "dedup: ") != 1 {
		t.Fatalf("ObserveBatch = %v; want ErrEmptyKey with one dedup: prefix", err)
	}
	if err := e.Backup("elsewhere"); err == nil || strings.Count(err.Error(), "dedup: ") != 1 {
		t.Fatalf("Backup of an in-memory engine = %v; want an error with one dedup: prefix", err)
	}
}
