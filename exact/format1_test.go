package exact

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// format1Dir is a store written by the format-1 code (Pebble WAL and
// memtable, before the commit log): seed meta; seq 1-3 keys 0-299 in
// generation 1 (checkpoint "cp1"), 300-599 in 2 ("cp2"), 600-899 in 3,
// flushed to an sstable; seq 4 keys 900-999 in 3, in the WAL; seq 5 drops
// the generations below 2, checkpoint "cp4"; the log truncated through
// seq 2.
const format1Dir = "testdata/format1"

// TestOpenFormat1 opens the format-1 store: everything it holds is found,
// it takes commits in the new format, and it is marked format 2.
func TestOpenFormat1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(dir, os.DirFS(format1Dir)); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, seq uint64, cp string, logs int) {
		t.Helper()
		if got, _ := s.Checkpoint(); string(got) != cp || s.CommitSeq() != seq || s.DroppedBefore() != 2 {
			t.Fatalf("checkpoint %q seq %d floor %d; want %q %d 2", got, s.CommitSeq(), s.DroppedBefore(), cp, seq)
		}
		if v, ok, err := s.GetMeta("seed"); err != nil || !ok || !bytes.Equal(v, []byte{1, 2, 3}) {
			t.Fatalf("meta seed = %v %v %v", v, ok, err)
		}
		for i := 0; i < 1000; i++ {
			gen := uint64(1 + min(i/300, 2))
			ok, err := s.Has(gen, keyOf(i))
			if err != nil || ok != (gen >= 2) {
				t.Fatalf("Has(%d, key %d) = %v, %v", gen, i, ok, err)
			}
		}
		n := 0
		if err := s.ScanLog(0, func(seq, gen, hash uint64) error {
			if seq < 3 || gen != 3 {
				t.Fatalf("log entry of seq %d gen %d after truncation through 2", seq, gen)
			}
			n++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n != logs {
			t.Fatalf("%d log entries, want %d", n, logs)
		}
	}
	s := mustOpen(t, dir, Options{})
	check(s, 5, "cp4", 400)
	commitRange(t, s, 3, 1000, 1001, []byte("cp6"))
	mustClose(t, s)
	s = mustOpen(t, dir, Options{})
	defer mustClose(t, s)
	check(s, 6, "cp6", 401)
	if ok, err := s.Has(3, keyOf(1000)); !ok || err != nil {
		t.Fatalf("key of the new commit: %v, %v", ok, err)
	}
	if v, _, err := s.get(markerKey); err != nil || !bytes.Equal(v, []byte{formatVersion}) {
		t.Fatalf("marker %x, %v; want format %d", v, err, formatVersion)
	}
}
