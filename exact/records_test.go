package exact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/streamdedup/dedup/internal/faultfs"
)

// wantRecord fails t unless GetRecord(fp) finds val in generation gen, or
// nothing if val is nil.
func wantRecord(t *testing.T, s *Store, fp Fingerprint, gen uint64, val []byte) {
	t.Helper()
	g, v, ok, err := s.GetRecord(fp)
	if err != nil {
		t.Fatalf("GetRecord: %v", err)
	}
	if val == nil {
		if ok {
			t.Fatalf("GetRecord = gen %d %q, want none", g, v)
		}
		return
	}
	if !ok || g != gen || !bytes.Equal(v, val) {
		t.Fatalf("GetRecord = gen %d %q (found %v), want gen %d %q", g, v, ok, gen, val)
	}
}

func TestRecordsNewestGenerationWins(t *testing.T) {
	forEachStoreMode(t, func(t *testing.T, dir string, o Options) {
		s := mustOpen(t, dir, o)
		a, b := s.Fingerprint([]byte("a")), s.Fingerprint([]byte("b"))
		if a == b {
			t.Fatal("two keys, one fingerprint")
		}
		wantRecord(t, s, a, 0, nil)
		if err := s.DeleteRecord(3, a); err != nil {
			t.Fatalf("DeleteRecord of an absent record: %v", err)
		}
		must(t, s.PutRecord(3, a, []byte("a3")))
		must(t, s.PutRecord(5, a, []byte("a5")))
		must(t, s.PutRecord(4, a, []byte("a4")))
		must(t, s.PutRecord(4, b, []byte{}))
		wantRecord(t, s, a, 5, []byte("a5"))
		wantRecord(t, s, b, 4, []byte{})
		must(t, s.PutRecord(5, a, []byte("a5'")))
		wantRecord(t, s, a, 5, []byte("a5'"))
		must(t, s.DeleteRecord(5, a))
		wantRecord(t, s, a, 4, []byte("a4"))
		// Keys and records of one batch commit together.
		bt := s.NewBatch()
		bt.Add(4, []byte("a"), 1)
		bt.PutRecord(6, a, []byte("a6"))
		bt.DeleteRecord(4, b)
		if _, err := bt.Commit(); err != nil {
			t.Fatal(err)
		}
		wantRecord(t, s, a, 6, []byte("a6"))
		wantRecord(t, s, b, 0, nil)
		mustClose(t, s)
		s = mustOpen(t, dir, o)
		defer mustClose(t, s)
		if s.Fingerprint([]byte("a")) != a {
			t.Fatal("the fingerprint of a key changed across Open")
		}
		wantRecord(t, s, a, 6, []byte("a6"))
		wantRecord(t, s, b, 0, nil)
		must(t, s.DeleteRecord(6, a))
		wantRecord(t, s, a, 4, []byte("a4"))
		must(t, s.DeleteRecord(4, a))
		wantRecord(t, s, a, 3, []byte("a3"))
	})
}

// TestRecordsAcrossFlushes puts and deletes records while flushes move
// them to Pebble: every read agrees with a model, after a reopen too.
func TestRecordsAcrossFlushes(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{memLimit: 2048})
	rng := rand.New(rand.NewPCG(3, 4))
	type gk struct {
		gen uint64
		key int
	}
	model := map[gk][]byte{}
	const keys = 20
	check := func() {
		t.Helper()
		for k := range keys {
			var want []byte
			var gen uint64
			for g := uint64(0); g < 8; g++ {
				if v, ok := model[gk{g, k}]; ok {
					want, gen = v, g
				}
			}
			wantRecord(t, s, s.Fingerprint(keyOf(k)), gen, want)
		}
	}
	for i := range 400 {
		k, g := rng.IntN(keys), uint64(rng.IntN(8))
		if rng.IntN(3) == 0 {
			must(t, s.DeleteRecord(g, s.Fingerprint(keyOf(k))))
			delete(model, gk{g, k})
		} else {
			v := bytes.Repeat([]byte{byte(i)}, rng.IntN(300))
			must(t, s.PutRecord(g, s.Fingerprint(keyOf(k)), v))
			model[gk{g, k}] = v
		}
		if i%50 == 0 {
			check()
		}
	}
	check()
	dir := s.dir
	mustClose(t, s)
	s = mustOpen(t, dir, Options{memLimit: 2048})
	defer mustClose(t, s)
	check()
}

func TestRecordsExpireWithTheirGeneration(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			o := Options{memLimit: m.memLimit}
			s := mustOpen(t, dir, o)
			old, both := s.Fingerprint([]byte("old")), s.Fingerprint([]byte("both"))
			must(t, s.PutRecord(1, old, []byte("o1")))
			must(t, s.PutRecord(1, both, []byte("b1")))
			must(t, s.PutRecord(2, both, []byte("b2")))
			b := s.NewBatch()
			b.DropGenerationsBefore(2)
			if _, err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			wantRecord(t, s, old, 0, nil)
			wantRecord(t, s, both, 2, []byte("b2"))
			// A record put below the floor is gone at once.
			must(t, s.PutRecord(1, old, []byte("late")))
			wantRecord(t, s, old, 0, nil)
			if err := s.Reclaim(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := countRange(t, s, tagGen(tagRecord, 0), tagGen(tagRecord, 2)); n != 0 {
				t.Fatalf("%d records below the floor left after Reclaim", n)
			}
			mustClose(t, s)
			s = mustOpen(t, dir, o)
			defer mustClose(t, s)
			wantRecord(t, s, old, 0, nil)
			must(t, s.DeleteRecord(2, both))
			wantRecord(t, s, both, 0, nil)
		})
	}
}

// countRange counts the Pebble keys in [lo, hi).
func countRange(t *testing.T, s *Store, lo, hi []byte) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRecordErrors(t *testing.T) {
	s := mustOpen(t, "store", Options{FS: vfs.NewMem()})
	defer mustClose(t, s)
	fp := s.Fingerprint([]byte("k"))
	if err := s.PutRecord(1, fp, make([]byte, MaxRecordSize+1)); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("PutRecord of %d bytes = %v, want ErrRecordTooLarge", MaxRecordSize+1, err)
	}
	b := s.NewBatch()
	b.Add(1, []byte("k"), 1)
	b.PutRecord(1, fp, make([]byte, MaxRecordSize+1))
	if _, err := b.Commit(); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("Commit = %v, want ErrRecordTooLarge", err)
	}
	if ok, err := s.Has(1, []byte("k")); err != nil || ok {
		t.Fatalf("Has after a refused batch = %v, %v; want nothing written", ok, err)
	}
	wantRecord(t, s, fp, 0, nil)
	must(t, s.PutRecord(1, fp, make([]byte, MaxRecordSize)))
	lo := mustOpen(t, "lo", Options{FS: vfs.NewMem(), LogOnly: true})
	defer mustClose(t, lo)
	if err := lo.PutRecord(1, fp, nil); !errors.Is(err, ErrLogOnly) {
		t.Fatalf("PutRecord in LogOnly = %v, want ErrLogOnly", err)
	}
	if _, _, _, err := lo.GetRecord(fp); !errors.Is(err, ErrLogOnly) {
		t.Fatalf("GetRecord in LogOnly = %v, want ErrLogOnly", err)
	}
}

// TestFingerprintSecret: fingerprints depend on a secret of the store,
// kept across Open and in a backup, and different in another store.
func TestFingerprintSecret(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "a", Options{FS: fs})
	fp := s.Fingerprint([]byte("key"))
	must(t, s.PutRecord(1, fp, []byte("v")))
	if err := s.Backup("copy"); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	other := mustOpen(t, "b", Options{FS: fs})
	if other.Fingerprint([]byte("key")) == fp {
		t.Fatal("two stores give a key the same fingerprint: no secret")
	}
	mustClose(t, other)
	for _, dir := range []string{"a", "copy"} {
		s := mustOpen(t, dir, Options{FS: fs})
		if s.Fingerprint([]byte("key")) != fp {
			t.Fatalf("%s: the fingerprint changed", dir)
		}
		wantRecord(t, s, fp, 1, []byte("v"))
		mustClose(t, s)
	}
}

// TestRecordsCrashDuringPuts crashes the store while goroutines put
// records (their fsyncs shared): every PutRecord that returned before the
// crash is found after it.
func TestRecordsCrashDuringPuts(t *testing.T) {
	const writers, each = 4, 150
	mem := newCrashableFS()
	o := Options{FS: mem.FS(), memLimit: 8 << 10}
	s := mustOpen(t, "db", o)
	defer mustClose(t, s)
	var mu sync.Mutex
	var done []int // records whose PutRecord returned
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * each; i < (w+1)*each; i++ {
				if err := s.PutRecord(7, s.Fingerprint(keyOf(i)), []byte(fmt.Sprint("v", i))); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				done = append(done, i)
				mu.Unlock()
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	rng := rand.New(rand.NewPCG(5, 6))
	crashes := 0
	for running := true; running; crashes++ {
		select {
		case <-finished:
			running = false
		default:
		}
		mu.Lock()
		acked := append([]int(nil), done...)
		mu.Unlock()
		clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
		c, err := Open("db", Options{FS: clone, memLimit: 8 << 10})
		if err != nil {
			t.Fatalf("reopen after crash: %v", err)
		}
		for _, i := range acked {
			wantRecord(t, c, c.Fingerprint(keyOf(i)), 7, []byte(fmt.Sprint("v", i)))
		}
		mustClose(t, c)
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d crashes", crashes)
}

// TestRecordIOError fails the k-th write after some records are in, for
// every k: the failing PutRecord or DeleteRecord reports the injected
// error, the store is then broken, and a restart finds every record whose
// call returned.
func TestRecordIOError(t *testing.T) {
	injections := 0
	for k := int32(0); ; k++ {
		mem := newCrashableFS()
		at := errorfs.OnIndex(k)
		inj := &errorfs.Toggle{Injector: faultfs.If(errorfs.And(errorfs.Writes, at), errorfs.ErrInjected)}
		s := mustOpen(t, "db", Options{FS: errorfs.Wrap(mem.FS(), inj), memLimit: 4096})
		must(t, s.PutRecord(1, s.Fingerprint(keyOf(0)), []byte("first")))
		inj.On()
		want := map[int]string{0: "first"}
		var ferr error
		failed, failedVal := -1, "" // the key of the failed call, the value it would leave
		for i := 1; i < 30 && ferr == nil; i++ {
			fp := s.Fingerprint(keyOf(i % 7))
			val := ""
			if i%4 == 0 {
				ferr = s.DeleteRecord(1, fp)
			} else {
				val = fmt.Sprint("v", i)
				ferr = s.PutRecord(1, fp, []byte(val))
			}
			if ferr != nil {
				failed, failedVal = i%7, val
			} else if val == "" {
				delete(want, i%7)
			} else {
				want[i%7] = val
			}
		}
		inj.Off()
		if at.Load() >= 0 {
			if ferr != nil {
				t.Fatalf("k=%d: failed without injection: %v", k, ferr)
			}
			mustClose(t, s)
			break
		}
		if ferr == nil {
			mustClose(t, s) // the error hit a background path
			continue
		}
		injections++
		if !errors.Is(ferr, errorfs.ErrInjected) {
			t.Fatalf("k=%d: error %v does not wrap ErrInjected", k, ferr)
		}
		if err := s.PutRecord(1, s.Fingerprint(keyOf(0)), nil); !errors.Is(err, ErrBroken) {
			t.Fatalf("k=%d: PutRecord after failure = %v, want ErrBroken", k, err)
		}
		if _, _, _, err := s.GetRecord(s.Fingerprint(keyOf(0))); !errors.Is(err, ErrBroken) {
			t.Fatalf("k=%d: GetRecord after failure = %v, want ErrBroken", k, err)
		}
		clone := mem.CrashClone(vfs.CrashCloneCfg{})
		_ = s.Close()
		c := mustOpen(t, "db", Options{FS: clone, memLimit: 4096})
		for i := range 7 {
			_, v, ok, err := c.GetRecord(c.Fingerprint(keyOf(i)))
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if ok {
				got = string(v)
			}
			// The failed call may or may not have landed.
			if got != want[i] && !(i == failed && got == failedVal) {
				t.Fatalf("k=%d: record %d = %q after a restart, want %q", k, i, got, want[i])
			}
		}
		mustClose(t, c)
	}
	if injections == 0 {
		t.Fatal("no injected error reached a record call")
	}
	t.Logf("%d failing calls checked", injections)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGetRecord reads records held in the memtable, in the newest
// generation, as an idempotency replay finds them.
func BenchmarkGetRecord(b *testing.B) {
	s := mustOpen(b, b.TempDir(), Options{})
	defer mustClose(b, s)
	const n = 1024
	fps := make([]Fingerprint, n)
	bt := s.NewBatch()
	for i := range fps {
		fps[i] = s.Fingerprint(keyOf(i))
		bt.PutRecord(7, fps[i], []byte("200 OK"))
	}
	if _, err := bt.Commit(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, _, ok, err := s.GetRecord(fps[i%n]); err != nil || !ok {
			b.Fatalf("GetRecord: %v %v", ok, err)
		}
	}
}
