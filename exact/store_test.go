package exact

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// modes runs a test with commits kept in the memtable (until Close, so
// that Open replays them from the commit log) and with every commit
// flushed to Pebble at once.
var modes = []struct {
	name     string
	memLimit int
}{
	{"memtable", 0},
	{"flushed", 1},
}

// forEachStoreMode runs f in a subtest for each of the modes, on disk
// and on a vfs.NewMem file system: o is the mode's Options and dir the
// store's directory on that file system.
func forEachStoreMode(t *testing.T, f func(t *testing.T, dir string, o Options)) {
	for _, m := range modes {
		for _, fsName := range []string{"disk", "mem"} {
			t.Run(m.name+"/"+fsName, func(t *testing.T) {
				o := Options{memLimit: m.memLimit}
				dir := t.TempDir()
				if fsName == "mem" {
					o.FS = vfs.NewMem()
					dir = "store"
				}
				f(t, dir, o)
			})
		}
	}
}

func keyOf(i int) []byte { return []byte(fmt.Sprintf("key-%08d", i)) }

func hashOf(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 + 1 }

func mustOpen(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	return s
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// commitRange commits keys [from, to) in generation gen with checkpoint cp.
func commitRange(t testing.TB, s *Store, gen uint64, from, to int, cp []byte) uint64 {
	t.Helper()
	b := s.NewBatch()
	for i := from; i < to; i++ {
		b.Add(gen, keyOf(i), hashOf(i))
	}
	b.SetCheckpoint(cp)
	seq, err := b.Commit()
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return seq
}

func TestRoundTrip(t *testing.T) {
	forEachStoreMode(t, func(t *testing.T, dir string, o Options) {
		s := mustOpen(t, dir, o)
		if cp, err := s.Checkpoint(); err != nil || cp != nil {
			t.Fatalf("Checkpoint of new store = %q, %v; want nil", cp, err)
		}
		if err := s.SetMeta("seed", []byte{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		seq1 := commitRange(t, s, 7, 0, 100, []byte("cp1"))
		seq2 := commitRange(t, s, 8, 100, 200, nil)
		if seq1 != 1 || seq2 != 2 || s.CommitSeq() != 2 {
			t.Fatalf("seqs %d %d CommitSeq %d, want 1 2 2", seq1, seq2, s.CommitSeq())
		}
		check := func(s *Store) {
			t.Helper()
			for i := 0; i < 200; i++ {
				gen := uint64(7 + i/100)
				if ok, err := s.Has(gen, keyOf(i)); err != nil || !ok {
					t.Fatalf("Has(%d, %s) = %v, %v", gen, keyOf(i), ok, err)
				}
				if ok, err := s.Has(gen+1, keyOf(i)); err != nil || ok {
					t.Fatalf("Has(%d, %s) in wrong gen = %v, %v", gen+1, keyOf(i), ok, err)
				}
			}
			if ok, _ := s.Has(7, []byte("absent")); ok {
				t.Fatal("absent key found")
			}
			if cp, err := s.Checkpoint(); err != nil || string(cp) != "cp1" {
				t.Fatalf("Checkpoint = %q, %v; want cp1", cp, err)
			}
			if v, ok, err := s.GetMeta("seed"); err != nil || !ok || !bytes.Equal(v, []byte{1, 2, 3}) {
				t.Fatalf("GetMeta = %v %v %v", v, ok, err)
			}
			if _, ok, err := s.GetMeta("nope"); err != nil || ok {
				t.Fatalf("GetMeta(nope) = %v %v", ok, err)
			}
		}
		check(s)
		mustClose(t, s)
		s = mustOpen(t, dir, o)
		defer mustClose(t, s)
		check(s)
		if s.CommitSeq() != 2 {
			t.Fatalf("CommitSeq after reopen = %d", s.CommitSeq())
		}
		if seq := commitRange(t, s, 8, 200, 201, []byte("cp3")); seq != 3 {
			t.Fatalf("seq after reopen = %d, want 3", seq)
		}
		if cp, _ := s.Checkpoint(); string(cp) != "cp3" {
			t.Fatalf("Checkpoint = %q", cp)
		}
		if s.DiskUsage() == 0 {
			t.Fatal("DiskUsage = 0")
		}
	})
}

func TestDropGenerationsBefore(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			fs := vfs.NewMem()
			o := Options{FS: fs, memLimit: m.memLimit}
			s := mustOpen(t, "d", o)
			for g := uint64(1); g <= 5; g++ {
				commitRange(t, s, g, int(g)*10, int(g)*10+10, nil)
			}
			b := s.NewBatch()
			b.Add(2, keyOf(999), 1) // dropped in the same batch
			b.Add(6, keyOf(60), hashOf(60))
			b.DropGenerationsBefore(4)
			b.SetCheckpoint([]byte("after-drop"))
			if _, err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			verify := func(s *Store) {
				t.Helper()
				got := map[uint64]int{}
				if err := s.ScanFingerprints(0, func(gen uint64, _ Fingerprint) error {
					got[gen]++
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				want := map[uint64]int{4: 10, 5: 10, 6: 1}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("generations after drop = %v, want %v", got, want)
				}
				for i := 10; i < 40; i++ {
					if ok, _ := s.Has(uint64(i/10), keyOf(i)); ok {
						t.Fatalf("key %d of dropped gen %d still there", i, i/10)
					}
				}
				if ok, _ := s.Has(4, keyOf(40)); !ok {
					t.Fatal("key of gen 4 lost")
				}
				logGens := map[uint64]int{}
				if err := s.ScanLog(0, func(seq, gen, hash uint64) error {
					logGens[gen]++
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(logGens) != fmt.Sprint(want) {
					t.Fatalf("log generations after drop = %v, want %v", logGens, want)
				}
				if s.DroppedBefore() != 4 {
					t.Fatalf("DroppedBefore = %d", s.DroppedBefore())
				}
			}
			verify(s)
			// A later, smaller drop does not resurrect anything.
			b = s.NewBatch()
			b.DropGenerationsBefore(2)
			if _, err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)
			s = mustOpen(t, "d", o)
			defer mustClose(t, s)
			verify(s)
		})
	}
}

func TestScanLogAndTruncate(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := mustOpen(t, "d", Options{FS: vfs.NewMem(), memLimit: m.memLimit})
			defer mustClose(t, s)
			// seq 1: gens 1,1,2,1 (three runs); seq 2: empty; seq 3: gen 3.
			b := s.NewBatch()
			for i, g := range []uint64{1, 1, 2, 1} {
				b.Add(g, keyOf(i), hashOf(i))
			}
			if _, err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			commitRange(t, s, 0, 0, 0, nil)
			commitRange(t, s, 3, 10, 12, nil)
			type e struct{ seq, gen, hash uint64 }
			scan := func(after uint64) []e {
				var out []e
				if err := s.ScanLog(after, func(seq, gen, hash uint64) error {
					out = append(out, e{seq, gen, hash})
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return out
			}
			all := []e{{1, 1, hashOf(0)}, {1, 1, hashOf(1)}, {1, 2, hashOf(2)}, {1, 1, hashOf(3)}, {3, 3, hashOf(10)}, {3, 3, hashOf(11)}}
			if got := scan(0); fmt.Sprint(got) != fmt.Sprint(all) {
				t.Fatalf("ScanLog(0) = %v, want %v", got, all)
			}
			if got := scan(1); fmt.Sprint(got) != fmt.Sprint(all[4:]) {
				t.Fatalf("ScanLog(1) = %v, want %v", got, all[4:])
			}
			if err := s.TruncateLog(2); err != nil {
				t.Fatal(err)
			}
			if got := scan(0); fmt.Sprint(got) != fmt.Sprint(all[4:]) {
				t.Fatalf("ScanLog after truncate = %v, want %v", got, all[4:])
			}
			stop := errors.New("stop")
			if err := s.ScanLog(0, func(_, _, _ uint64) error { return stop }); !errors.Is(err, stop) {
				t.Fatalf("ScanLog error = %v, want stop", err)
			}
			// ScanFingerprints from a generation, in (gen, fingerprint) order.
			var keys []string
			if err := s.ScanFingerprints(2, func(gen uint64, fp Fingerprint) error {
				keys = append(keys, fmt.Sprintf("%d/%x", gen, fp))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, k := range []struct{ gen, i int }{{2, 2}, {3, 10}, {3, 11}} {
				want = append(want, fmt.Sprintf("%d/%x", k.gen, s.Fingerprint(keyOf(k.i))))
			}
			slices.Sort(want[1:])
			if fmt.Sprint(keys) != fmt.Sprint(want) {
				t.Fatalf("ScanFingerprints(2) = %v, want %v", keys, want)
			}
		})
	}
}

func TestLogOnly(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "d", Options{FS: fs, LogOnly: true})
	commitRange(t, s, 1, 0, 1000, []byte("cp"))
	if _, err := s.Has(1, keyOf(1)); !errors.Is(err, ErrLogOnly) {
		t.Fatalf("Has in LogOnly = %v, want ErrLogOnly", err)
	}
	n := 0
	if err := s.ScanLog(0, func(_, _, _ uint64) error { n++; return nil }); err != nil || n != 1000 {
		t.Fatalf("ScanLog = %d, %v; want 1000", n, err)
	}
	mustClose(t, s)
	s = mustOpen(t, "d", Options{FS: fs})
	defer mustClose(t, s)
	if ok, err := s.Has(1, keyOf(1)); err != nil || ok {
		t.Fatalf("LogOnly store holds a key: %v %v", ok, err)
	}
}

func TestNotOurs(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("other", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("other/notes.txt", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("hello"))
	f.Close()
	if _, err := Open("other", Options{FS: fs}); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Open of a foreign dir = %v, want ErrNotOurs", err)
	}
	// An empty existing directory is fine.
	if err := fs.MkdirAll("empty", 0o755); err != nil {
		t.Fatal(err)
	}
	mustClose(t, mustOpen(t, "empty", Options{FS: fs}))
}

func TestBadInput(t *testing.T) {
	s := mustOpen(t, "d", Options{FS: vfs.NewMem()})
	commitRange(t, s, 1, 0, 10, []byte("good"))
	for _, tc := range []struct {
		name string
		key  []byte
		want error
	}{
		{"empty", nil, ErrEmptyKey},
		{"huge", make([]byte, MaxKeySize+1), ErrKeyTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := s.NewBatch()
			b.Add(1, []byte("fine"), 1)
			b.Add(1, tc.key, 2)
			b.SetCheckpoint([]byte("bad"))
			if _, err := b.Commit(); !errors.Is(err, tc.want) {
				t.Fatalf("Commit = %v, want %v", err, tc.want)
			}
			if _, err := s.Has(1, tc.key); !errors.Is(err, tc.want) {
				t.Fatalf("Has = %v, want %v", err, tc.want)
			}
			if ok, _ := s.Has(1, []byte("fine")); ok {
				t.Fatal("a key of the failed batch was written")
			}
			if cp, _ := s.Checkpoint(); string(cp) != "good" {
				t.Fatalf("Checkpoint = %q, want good", cp)
			}
		})
	}
	// The largest key is fine.
	big := bytes.Repeat([]byte{0xff}, MaxKeySize)
	b := s.NewBatch()
	b.Add(1, big, 3)
	if _, err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Has(1, big); !ok || err != nil {
		t.Fatalf("Has(max key) = %v %v", ok, err)
	}
	// A committed batch cannot be reused.
	if _, err := b.Commit(); !errors.Is(err, ErrBatchDone) {
		t.Fatalf("second Commit = %v, want ErrBatchDone", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Has(1, big); !errors.Is(err, ErrClosed) {
		t.Fatalf("Has after Close = %v", err)
	}
	if _, err := s.NewBatch().Commit(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close = %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	s = mustOpen(t, "d", Options{FS: s.fs})
	defer mustClose(t, s)
	if ok, err := s.Has(1, big); !ok || err != nil {
		t.Fatalf("Has(max key) after reopen = %v %v", ok, err)
	}
}

// TestLogRecordCorrupt checks decodeLogRecord rejects truncated records.
func TestLogRecordCorrupt(t *testing.T) {
	runs := []run{{5, 2}, {6, 1}}
	rec := make([]byte, logRecordSize(runs))
	encodeLogRecord(rec, runs, []uint64{1, 2, 3})
	for n := 0; n < len(rec); n++ {
		err := decodeLogRecord(1, rec[:n], 0, func(_, _, _ uint64) error { return nil })
		if n != 1 && n != 1+2+16 && !errors.Is(err, ErrCorrupt) { // a prefix ending on a run boundary is valid
			t.Fatalf("truncated at %d: %v", n, err)
		}
	}
	_ = binary.LittleEndian
}

// TestSortKeys: sortedKeys puts fingerprints in byte order, those added
// twice and those sharing their first 8 bytes (which the radix sort
// leaves in a run) included.
func TestSortKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 100, 5000, 50000} {
		g := newMemGen(1, 0)
		var want []string
		var prev Fingerprint
		for i := 0; i < n; i++ {
			var fp Fingerprint
			binary.LittleEndian.PutUint64(fp[:], rng.Uint64())
			binary.LittleEndian.PutUint64(fp[8:], rng.Uint64())
			switch rng.IntN(4) {
			case 0:
				fp = prev // added twice
			case 1:
				copy(fp[:8], prev[:8]) // the same first half
			}
			prev = fp
			g.add(&fp)
			want = append(want, fmt.Sprintf("%x", fp))
		}
		slices.Sort(want)
		ents, _ := g.sortedKeys(nil, nil)
		var got []string
		for _, e := range ents {
			got = append(got, fmt.Sprintf("%x", g.keyAt(int(e.off))))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: sortedKeys order differs", n)
		}
	}
}

// TestSelfPrefix: the prefix fatalLogger looks for on the stack names this
// package, so that a fatal error on a Store call is returned, not taken for
// one on a background goroutine.
func TestSelfPrefix(t *testing.T) {
	if !strings.HasSuffix(selfPrefix, "/exact.") {
		t.Fatalf("selfPrefix = %q", selfPrefix)
	}
	var pcs [1]uintptr
	runtime.Callers(1, pcs[:])
	if f, _ := runtime.CallersFrames(pcs[:]).Next(); !strings.HasPrefix(f.Function, selfPrefix) {
		t.Fatalf("%q does not start with %q", f.Function, selfPrefix)
	}
}
