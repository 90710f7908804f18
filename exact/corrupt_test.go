package exact

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// flipLargestTable flips one byte in the middle of the largest table of the
// store in dir and returns that table's path.
func flipLargestTable(t testing.TB, dir string) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no table in %s: %v", dir, err)
	}
	var best string
	var size int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			best, size = p, fi.Size()
		}
	}
	flipByte(t, best, size/2)
	return best
}

// flipByte inverts the byte at off of the file at path.
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// corruptStore writes n keys of generation 1 into a store in a new
// directory, flushed into tables, flips a byte of its largest table and
// returns the directory and that table.
func corruptStore(t testing.TB, n int) (dir, table string) {
	t.Helper()
	dir = t.TempDir()
	s := mustOpen(t, dir, Options{memLimit: 1})
	commitRange(t, s, 1, 0, n, []byte("cp"))
	mustClose(t, s)
	return dir, flipLargestTable(t, dir)
}

// TestCorruptTableIsAnError pins that a damaged block of a table is an
// error of the corruption class naming the table, for lookups and scans,
// that the keys of undamaged blocks are still found, and that Close
// returns at once: Pebble's corruption report used to reach the fatal
// logger, whose panic went through the lookup with its locks held.
func TestCorruptTableIsAnError(t *testing.T) {
	const n = 20000
	dir, table := corruptStore(t, n)
	s := mustOpen(t, dir, Options{})
	// Every 7th key: each failed lookup costs Pebble a search for the
	// flipped bit.
	var bad, found, probed int
	for i := 0; i < n; i += 7 {
		probed++
		ok, err := s.Has(1, keyOf(i))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(table)) {
				t.Fatalf("Has(key %d): %v, want ErrCorrupt naming %s", i, err, table)
			}
			if bad == 0 {
				t.Logf("Has: %v", err)
			}
			bad++
			continue
		}
		if ok {
			found++
		}
	}
	if bad == 0 || found == 0 || bad+found != probed {
		t.Fatalf("%d lookups failed, %d found, of %d: want some of each and no key missing", bad, found, probed)
	}
	err := s.ScanFingerprints(0, func(uint64, Fingerprint) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(table)) {
		t.Fatalf("ScanFingerprints: %v, want ErrCorrupt naming %s", err, table)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestCheckFindsDamagedBlock pins that Check reads every table's blocks:
// a good store passes, one with a byte flipped in a table fails with
// ErrCorrupt naming it, and nothing is changed by either.
func TestCheckFindsDamagedBlock(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{memLimit: 1})
	commitRange(t, s, 1, 0, 5000, []byte("cp"))
	commitRange(t, s, 1, 5000, 6000, []byte("cp2")) // left in the commit log
	mustClose(t, s)
	res, err := Check(dir, Options{})
	if err != nil || res.Tables == 0 || res.Segments == 0 {
		t.Fatalf("Check of a good store: %+v, %v; want tables and segments read, no error", res, err)
	}
	table := flipLargestTable(t, dir)
	_, err = Check(dir, Options{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(table)) {
		t.Fatalf("Check of a damaged table: %v, want ErrCorrupt naming %s", err, table)
	}
}
