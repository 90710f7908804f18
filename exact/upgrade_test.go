package exact

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/streamdedup/dedup/internal/faultfs"
)

// goldenStores are stores of the old formats and the keys each holds in
// live generations.
var goldenStores = []struct {
	name, dir string
	keys      func() [][]byte
}{
	{"format1", format1Dir, func() [][]byte {
		var out [][]byte
		for i := 300; i < 1000; i++ { // generation 1 (keys 0-299) is dropped
			out = append(out, keyOf(i))
		}
		return out
	}},
	// An engine's state directory: its store is the directory itself.
	{"format2", "../testdata/state-exact-format2", func() [][]byte {
		var out [][]byte
		for g, n := range []int{500, 700} {
			for i := range n {
				out = append(out, fmt.Appendf(nil, "golden-exact-g%d-k%d", g, i))
			}
		}
		return out
	}},
}

// copyToFS copies the files of the directory src (not its subdirectories)
// into dir on fs, synced.
func copyToFS(t *testing.T, src string, fs vfs.FS, dir string) {
	t.Helper()
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f, err := fs.Create(fs.PathJoin(dir, e.Name()), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(syncDir(fs, dir), syncDir(fs, fs.PathDir(dir))); err != nil {
		t.Fatal(err)
	}
}

// checkFingerprints fails unless s holds the fingerprint of every key of
// keys, and nothing else.
func checkFingerprints(t *testing.T, s *Store, keys [][]byte, what string) {
	t.Helper()
	held := map[Fingerprint]bool{}
	if err := s.ScanFingerprints(0, func(_ uint64, fp Fingerprint) error {
		held[fp] = true
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for i, k := range keys {
		if !held[s.Fingerprint(k)] {
			t.Fatalf("%s: key %d (%q) lost", what, i, k)
		}
	}
	if len(held) != len(keys) {
		t.Fatalf("%s: %d fingerprints held, want %d", what, len(held), len(keys))
	}
}

// TestUpgradeGolden opens each golden store of an old format: it is of
// format 3 after, every key it held is found (by Has and among the
// fingerprints), and no file of the directory holds a key any more.
func TestUpgradeGolden(t *testing.T) {
	for _, g := range goldenStores {
		t.Run(g.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			copyToFS(t, g.dir, vfs.Default, dir)
			lg := &upgradeLog{}
			s := mustOpen(t, dir, Options{Logger: lg})
			keys := g.keys()
			checkFingerprints(t, s, keys, "after the upgrade")
			if v, _, err := s.get(markerKey); err != nil || !bytes.Equal(v, []byte{formatVersion}) {
				t.Fatalf("marker %x, %v; want format %d", v, err, formatVersion)
			}
			mustClose(t, s)
			if g.name != "format1" { // format 1 kept keys in Pebble's WAL, whose files Pebble recycles
				checkNoKeysAtRest(t, dir, keys)
			}
			s = mustOpen(t, dir, Options{Logger: lg})
			defer mustClose(t, s)
			checkFingerprints(t, s, keys, "reopened")
			want := fmt.Sprintf("from format %s to 3: binaries that read only format 2 or older can no longer open it", g.name[len("format"):])
			if lines := lg.get(); len(lines) != 1 || !strings.Contains(lines[0], want) {
				t.Fatalf("upgrade logged %q, want one line saying %q", lines, want)
			}
		})
	}
}

// upgradeLog records the messages of the store about an upgrade.
type upgradeLog struct {
	quietLogger
	mu    sync.Mutex
	lines []string
}

func (l *upgradeLog) Infof(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); strings.Contains(msg, "upgraded") {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, msg)
	}
}

func (l *upgradeLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// TestUpgradeCrashAtEveryWrite opens each golden store on a file system
// that takes a crash clone (unsynced data lost) at its k-th write, and
// opens the clone: it opens, as the old format or the new (and is then of
// the new), with every key, and once closed no file holds a key (the
// cleanup of the upgrade is redone by the Open after a crash that
// interrupted it). The two stores take turns over k (the first
// the even writes, the second the odd ones: both upgrade through the same
// steps), so that every write is a crash point in one of them, at half
// the cost.
func TestUpgradeCrashAtEveryWrite(t *testing.T) {
	for gi, g := range goldenStores {
		t.Run(g.name, func(t *testing.T) {
			keys := g.keys()
			k := int64(gi)
			for ; ; k += int64(len(goldenStores)) {
				mem := newCrashableFS()
				copyToFS(t, g.dir, mem.FS(), "db")
				var n atomic.Int64
				var clone *vfs.MemFS
				inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
					if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && n.Add(1) == k+1 {
						clone = mem.CrashClone(vfs.CrashCloneCfg{})
					}
					return nil
				})
				s := mustOpen(t, "db", Options{FS: errorfs.Wrap(mem.FS(), inj)})
				mustClose(t, s)
				if clone == nil {
					break // fewer than k+1 writes
				}
				s = mustOpen(t, "db", Options{FS: clone})
				checkFingerprints(t, s, keys, fmt.Sprintf("crash at write %d", k))
				if v, _, err := s.get(markerKey); err != nil || !bytes.Equal(v, []byte{formatVersion}) {
					t.Fatalf("crash at write %d: marker %x, %v after the upgrade", k, v, err)
				}
				mustClose(t, s)
				if _, err := keysAtRest(clone, "db", keys); err != nil {
					t.Fatalf("crash at write %d, then a clean Open and Close: %v", k, err)
				}
			}
			t.Logf("%d crash points checked", k)
		})
	}
}

// TestUpgradeFaultAtEveryWrite fails the k-th write of the upgrading Open
// to the store's own files (its tables being written, its commit log),
// for every k: Open fails with the error, and the next Open upgrades with
// every key. (Pebble panics on a failed write to its own WAL or on a
// failed directory sync; a crash there is TestUpgradeCrashAtEveryWrite's.)
func TestUpgradeFaultAtEveryWrite(t *testing.T) {
	for _, g := range goldenStores {
		t.Run(g.name, func(t *testing.T) {
			keys := g.keys()
			failed := 0
			for k := int32(0); ; k++ {
				mem := newCrashableFS()
				copyToFS(t, g.dir, mem.FS(), "db")
				at := errorfs.OnIndex(k)
				inj := faultfs.If(errorfs.And(errorfs.Writes, errorfs.PathMatch("db/exact-*"), at), errorfs.ErrInjected)
				s, err := Open("db", Options{FS: errorfs.Wrap(mem.FS(), inj)})
				if err == nil {
					mustClose(t, s)
					if at.Load() >= 0 { // fewer than k+1 writes: done
						break
					}
				} else {
					failed++
					if !errors.Is(err, errorfs.ErrInjected) {
						t.Fatalf("k=%d: Open failed with %v, not the injected error", k, err)
					}
				}
				s = mustOpen(t, "db", Options{FS: mem.FS()})
				checkFingerprints(t, s, keys, fmt.Sprintf("k=%d, reopened", k))
				if v, _, err := s.get(markerKey); err != nil || !bytes.Equal(v, []byte{formatVersion}) {
					t.Fatalf("k=%d: marker %x, %v after the upgrade", k, v, err)
				}
				mustClose(t, s)
			}
			t.Logf("%d failed upgrades checked", failed)
			if failed == 0 {
				t.Fatal("no fault failed an upgrade")
			}
		})
	}
}

// TestNoKeysAtRest writes keys of several generations, some flushed into
// tables, some left in the commit log, with result records and a
// checkpoint, closes the store, reopens and closes it: no file of the
// directory holds any of the keys.
func TestNoKeysAtRest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := mustOpen(t, dir, Options{memLimit: 64 << 10})
	var keys [][]byte
	for c := range 40 {
		b := s.NewBatch()
		for i := range 250 {
			k := fmt.Appendf(nil, "user-%05d@example.com", c*250+i)
			keys = append(keys, k)
			b.Add(uint64(1+c/10), k, hashOf(i))
		}
		b.PutRecord(uint64(1+c/10), s.Fingerprint(keys[len(keys)-1]), []byte("result"))
		b.SetCheckpoint(fmt.Appendf(nil, "cp-%d", c))
		if _, err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.flushAll(); err != nil {
		t.Fatal(err)
	}
	commitRange(t, s, 5, 0, 100, []byte("last")) // left in the commit log
	for i := range 100 {
		keys = append(keys, keyOf(i))
	}
	mustClose(t, s)
	checkNoKeysAtRest(t, dir, keys)
	s = mustOpen(t, dir, Options{})
	for _, k := range keys[:10] {
		if ok, err := s.Has(1, k); !ok || err != nil {
			t.Fatalf("key %q: %v, %v", k, ok, err)
		}
	}
	mustClose(t, s)
	checkNoKeysAtRest(t, dir, keys)
}

// checkNoKeysAtRest fails if a file under dir holds one of keys.
func checkNoKeysAtRest(t *testing.T, dir string, keys [][]byte) {
	t.Helper()
	files, err := keysAtRest(vfs.Default, dir, keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files, none holds any of %d keys", files, len(keys))
}

// keysAtRest returns an error naming the file and the key if a file under
// dir on fs holds one of keys, else the number of files it read.
func keysAtRest(fs vfs.FS, dir string, keys [][]byte) (files int, err error) {
	names, err := fs.List(dir)
	if err != nil {
		return files, err
	}
	for _, name := range names {
		path := fs.PathJoin(dir, name)
		fi, err := fs.Stat(path)
		if err != nil {
			return files, err
		}
		if fi.IsDir() {
			n, err := keysAtRest(fs, path, keys)
			files += n
			if err != nil {
				return files, err
			}
			continue
		}
		f, err := fs.Open(path)
		if err != nil {
			return files, err
		}
		b, err := io.ReadAll(f)
		if err = errors.Join(err, f.Close()); err != nil {
			return files, err
		}
		files++
		if k, i := keyIn(b, keys); k != nil {
			return files, fmt.Errorf("%s holds key %q at byte %d", path, k, i)
		}
	}
	return files, nil
}

// keyIn returns the first key of keys found in b and its offset, or nil.
// Every key starts with the keys' longest common prefix: b is searched for
// that, and each match checked against the keys.
func keyIn(b []byte, keys [][]byte) ([]byte, int) {
	if len(keys) == 0 {
		return nil, -1
	}
	prefix := keys[0]
	set := map[string]bool{}
	var lens []int
	for _, k := range keys {
		n := 0
		for n < len(prefix) && n < len(k) && prefix[n] == k[n] {
			n++
		}
		prefix = prefix[:n]
		if !slices.Contains(lens, len(k)) {
			lens = append(lens, len(k))
		}
		set[string(k)] = true
	}
	for off := 0; off <= len(b); off++ {
		i := bytes.Index(b[off:], prefix)
		if i < 0 {
			break
		}
		off += i
		for _, n := range lens {
			if off+n <= len(b) && set[string(b[off:off+n])] {
				return b[off : off+n], off
			}
		}
	}
	return nil, -1
}

// TestNewerFormat: a store whose marker names a format past this package's
// is refused with ErrNewerFormat naming the format and the directory, not
// as corrupt.
func TestNewerFormat(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "d", Options{FS: fs})
	if err := s.db.Set(markerKey, []byte{formatVersion + 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	_, err := Open("d", Options{FS: fs})
	want := fmt.Sprintf("%q has format %d, this package reads 1 to %d", "d", formatVersion+1, formatVersion)
	if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("Open = %v, want ErrNewerFormat saying %s", err, want)
	}
}
