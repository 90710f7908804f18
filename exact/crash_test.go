package exact

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/streamdedup/dedup/internal/faultfs"
)

// crashBatch commits batch i: keys i*per..i*per+per in generation 1, and
// checkpoint "cp-i".
func crashBatch(s *Store, i, per int) (uint64, error) {
	b := s.NewBatch()
	for k := i * per; k < i*per+per; k++ {
		b.Add(1, keyOf(k), hashOf(k))
	}
	b.SetCheckpoint([]byte(fmt.Sprintf("cp-%d", i)))
	return b.Commit()
}

// verifyCrashed opens a crash clone and checks that every batch < minDone
// is present, and that the batches present are exactly 0..c where "cp-c" is
// the checkpoint (all-or-nothing with the checkpoint, and in order).
func verifyCrashed(t *testing.T, fs vfs.FS, o Options, minDone, total, per int) {
	t.Helper()
	o.FS = fs
	s, err := Open("db", o)
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer mustClose(t, s)
	last, cp := committedThrough(t, s, minDone, "")
	for i := 0; i < total; i++ {
		want := i <= last
		for k := i * per; k < i*per+per; k++ {
			ok, err := s.Has(1, keyOf(k))
			if err != nil {
				t.Fatal(err)
			}
			if ok != want {
				t.Fatalf("batch %d key %d present=%v, checkpoint %q", i, k, ok, cp)
			}
		}
	}
	n := 0
	if err := s.ScanLog(0, func(seq, gen, hash uint64) error {
		if hash != hashOf(n) {
			return fmt.Errorf("log entry %d (seq %d) hash %x, want %x", n, seq, hash, hashOf(n))
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != (last+1)*per {
		t.Fatalf("log holds %d entries, want %d", n, (last+1)*per)
	}
	// The clone is writable and continues the sequence.
	if seq, err := crashBatch(s, total+1, 1); err != nil || seq != uint64(last+2) {
		t.Fatalf("commit after crash: seq %d, %v; want %d", seq, err, last+2)
	}
}

// TestCrash crash-clones the store after each committed batch (and, in a
// second phase, while a commit runs in another goroutine) and checks the
// clone against the contract.
func TestCrash(t *testing.T) {
	const total, per = 8, 50
	for _, m := range modes {
		for _, pct := range []int{0, 50, 100} {
			t.Run(m.name+"/unsynced="+strconv.Itoa(pct), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(pct), 7))
				mem := newCrashableFS()
				o := Options{FS: mem.FS(), memLimit: m.memLimit, MemTableSize: 1 << 20}
				s := mustOpen(t, "db", o)
				for i := 0; i < total; i++ {
					if _, err := crashBatch(s, i, per); err != nil {
						t.Fatal(err)
					}
					clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng})
					verifyCrashed(t, clone, o, i+1, total, per)
				}
				mustClose(t, s)
			})
		}
	}
}

// TestCrashDuringCommit clones while commits run in another goroutine.
func TestCrashDuringCommit(t *testing.T) {
	const total, per = 30, 200
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			mem := newCrashableFS()
			o := Options{FS: mem.FS(), memLimit: m.memLimit, MemTableSize: 1 << 20}
			s := mustOpen(t, "db", o)
			defer mustClose(t, s)
			var mu sync.Mutex
			done := 0 // batches whose Commit returned
			errc := make(chan error, 1)
			go func() {
				for i := 0; i < total; i++ {
					if _, err := crashBatch(s, i, per); err != nil {
						errc <- err
						return
					}
					mu.Lock()
					done = i + 1
					mu.Unlock()
				}
				errc <- nil
			}()
			for running := true; running; {
				select {
				case err := <-errc:
					if err != nil {
						t.Fatal(err)
					}
					running = false
				default:
				}
				mu.Lock()
				minDone := done
				mu.Unlock()
				clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
				verifyCrashed(t, clone, o, minDone, total, per)
			}
		})
	}
}

// TestCommitIOError injects an I/O error at the k-th file write operation
// (MANIFEST excluded) after the first commit, for every k: the failing Commit returns an error
// (no panic, no exit), the store then reports ErrBroken, and a restart finds
// every batch whose Commit returned, with the failed batch all-or-nothing.
func TestCommitIOError(t *testing.T) {
	const total, per = 4, 20
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			injections := 0
			for k := int64(0); ; k++ {
				mem := newCrashableFS()
				// Every write counts, MANIFEST writes (fatal to Pebble) and
				// those of background flushes included.
				at := errorfs.OnIndex(int32(k))
				inj := &errorfs.Toggle{Injector: faultfs.If(errorfs.And(errorfs.Writes, at), errorfs.ErrInjected)}
				o := Options{FS: errorfs.Wrap(mem.FS(), inj), memLimit: m.memLimit}
				s := mustOpen(t, "db", o)
				if _, err := crashBatch(s, 0, per); err != nil {
					t.Fatal(err)
				}
				inj.On()
				committed := 1
				var cerr error
				for i := 1; i < total && cerr == nil; i++ {
					if _, cerr = crashBatch(s, i, per); cerr == nil {
						committed = i + 1
					}
				}
				inj.Off()
				if at.Load() >= 0 { // fewer than k+1 writes: nothing injected
					if cerr != nil {
						t.Fatalf("k=%d: Commit failed without injection: %v", k, cerr)
					}
					mustClose(t, s)
					break
				}
				if cerr == nil {
					// The error hit a background or non-fatal path.
					mustClose(t, s)
					continue
				}
				injections++
				if !errors.Is(cerr, errorfs.ErrInjected) {
					t.Fatalf("k=%d: Commit error %v does not wrap ErrInjected", k, cerr)
				}
				if _, err := crashBatch(s, 9, 1); !errors.Is(err, ErrBroken) {
					t.Fatalf("k=%d: Commit after failure = %v, want ErrBroken", k, err)
				}
				if _, err := s.Has(1, keyOf(0)); !errors.Is(err, ErrBroken) {
					t.Fatalf("k=%d: Has after failure = %v, want ErrBroken", k, err)
				}
				clone := mem.CrashClone(vfs.CrashCloneCfg{})
				_ = s.Close() // may report the failure again
				verifyCrashed(t, clone, Options{memLimit: m.memLimit}, committed, total, per)
			}
			t.Logf("%d failing commits checked", injections)
			if injections == 0 {
				t.Fatal("no injected error reached Commit")
			}
		})
	}
}

// TestFlushError fails every sstable write from some point on, as a full
// disk does while recycled WAL files still take writes: Pebble's flushes
// then fail (and are retried for ever), and once the memtables are full
// its writes stall. Commits must fail with the cause instead of hanging,
// and closing and reopening must recover every committed batch.
func TestFlushError(t *testing.T) {
	mem := vfs.NewCrashableMem()
	sstWrites := errorfs.And(errorfs.Writes, errorfs.PathMatch("db/*.sst"))
	inj := &errorfs.Toggle{Injector: faultfs.If(sstWrites, &fs.PathError{Op: "write", Path: "sstable", Err: syscall.ENOSPC})}
	o := Options{FS: errorfs.Wrap(mem, inj), MemTableSize: 1 << 20}
	s := mustOpen(t, "db", o)
	const per = 2000 // ~100 KB of memtable per batch
	inj.On()
	done := make(chan struct{})
	var committed int
	var cerr error
	go func() {
		defer close(done)
		for i := 0; i < 1000 && cerr == nil; i++ {
			if _, cerr = crashBatch(s, i, per); cerr == nil {
				committed = i + 1
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // 1000 batches are 100 memtables
		t.Fatalf("Commit hangs after %d batches while sstable writes fail", committed)
	}
	inj.Off()
	t.Logf("%d batches committed before: %v", committed, cerr)
	if !errors.Is(cerr, syscall.ENOSPC) || !errors.Is(cerr, ErrBroken) {
		t.Fatalf("after %d batches: Commit error %v, want ErrBroken wrapping ENOSPC", committed, cerr)
	}
	if _, err := s.Has(1, keyOf(0)); !errors.Is(err, ErrBroken) {
		t.Fatalf("Has after the failure = %v, want ErrBroken", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after a failed flush: %v", err)
	}
	verifyCrashed(t, mem, Options{}, committed, committed+1, per)
}

// TestHasReadError fails random reads (one in 4, seeded) while Has
// looks up stored keys of a store larger than its block cache: each
// Has must report the key present or return the error, never absent, since
// an absent committed key would be a second New for it. Once the faults
// stop every key is found again: a failed read breaks nothing.
func TestHasReadError(t *testing.T) {
	mem := vfs.NewMem()
	faults := &errorfs.Counter{Injector: faultfs.If(errorfs.And(errorfs.Reads, errorfs.Randomly(0.25, 7)), errorfs.ErrInjected)}
	inj := &errorfs.Toggle{Injector: faults}
	o := Options{FS: errorfs.Wrap(mem, inj), MemTableSize: 1 << 20, CacheSize: 1}
	s := mustOpen(t, "db", o)
	const batches, per = 20, 5000 // ~10 MB of sstables against a 2 MB cache
	for i := 0; i < batches; i++ {
		if _, err := crashBatch(s, i, per); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	s = mustOpen(t, "db", o) // the keys are in sstables now
	defer mustClose(t, s)
	// A spread sample of the keys (each lookup is slow under -race).
	const lookups = 3000
	sample := func(i int) int { return i * 7919 % (batches * per) }
	inj.On()
	var errs int
	for i := 0; i < lookups; i++ {
		k := sample(i)
		ok, err := s.Has(1, keyOf(k))
		switch {
		case err != nil:
			errs++
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("key %d: Has error does not wrap the fault: %v", k, err)
			}
		case !ok:
			t.Fatalf("key %d: reported absent while reads fail", k)
		}
	}
	inj.Off()
	t.Logf("%d read faults, %d of %d lookups failed", faults.Load(), errs, lookups)
	if errs == 0 {
		t.Fatal("no read fault reached Has")
	}
	for i := 0; i < lookups; i++ {
		k := sample(i)
		if ok, err := s.Has(1, keyOf(k)); err != nil || !ok {
			t.Fatalf("key %d after the faults: %v, %v", k, ok, err)
		}
	}
}

// TestBackupWhileCommitting takes a backup while another goroutine commits:
// the backup opens and holds every batch committed before Backup began.
func TestBackupWhileCommitting(t *testing.T) {
	const per = 100
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			fs := vfs.NewMem()
			o := Options{FS: fs, memLimit: m.memLimit, MemTableSize: 1 << 20}
			s := mustOpen(t, "db", o)
			defer mustClose(t, s)
			var done atomic.Int64
			stop := make(chan struct{})
			errc := make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						errc <- nil
						return
					default:
					}
					if _, err := crashBatch(s, i, per); err != nil {
						errc <- err
						return
					}
					done.Store(int64(i + 1))
				}
			}()
			for done.Load() < 3 {
				time.Sleep(time.Millisecond)
			}
			before := int(done.Load())
			if err := s.Backup("backup"); err != nil {
				t.Fatal(err)
			}
			close(stop)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if err := s.Backup("backup"); err == nil {
				t.Fatal("Backup into an existing directory succeeded")
			}
			b := mustOpen(t, "backup", Options{FS: fs})
			defer mustClose(t, b)
			cp, _ := b.Checkpoint()
			var last int
			if _, err := fmt.Sscanf(string(cp), "cp-%d", &last); err != nil || last < before-1 {
				t.Fatalf("backup checkpoint %q, want >= cp-%d", cp, before-1)
			}
			for k := 0; k < (last+1)*per; k++ {
				if ok, err := b.Has(1, keyOf(k)); !ok || err != nil {
					t.Fatalf("backup lacks key %d: %v", k, err)
				}
			}
			if ok, _ := b.Has(1, keyOf((last+1)*per)); ok {
				t.Fatal("backup holds a key of a batch after its checkpoint")
			}
		})
	}
}

// segFilesFS counts the commit-log segment files open through it.
type segFilesFS struct {
	vfs.FS
	open *atomic.Int64
}

func (c segFilesFS) track(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.Contains(name, segPrefix) {
		return f, err
	}
	c.open.Add(1)
	return &segFile{File: f, open: c.open}, nil
}

func (c segFilesFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return c.track(name, f, err)
}

func (c segFilesFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.Open(name, opts...)
	return c.track(name, f, err)
}

func (c segFilesFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(oldname, newname, cat)
	return c.track(newname, f, err)
}

type segFile struct {
	vfs.File
	open   *atomic.Int64
	closed atomic.Bool
}

func (f *segFile) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		f.open.Add(-1)
	}
	return f.File.Close()
}

// TestCloseClosesSegments: Close releases the files of every commit-log
// segment, those of memtables still waiting for their flush included (here
// the flushes fail, so every frozen memtable keeps its segment).
func TestCloseClosesSegments(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var open atomic.Int64
	sstWrites := errorfs.And(errorfs.Writes, errorfs.PathMatch("db/*.sst"))
	inj := &errorfs.Toggle{Injector: faultfs.If(sstWrites, errorfs.ErrInjected)}
	o := Options{FS: segFilesFS{FS: errorfs.Wrap(mem, inj), open: &open}, memLimit: 1}
	s := mustOpen(t, "db", o)
	inj.On()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = crashBatch(s, i, 10)
	}
	if !errors.Is(err, ErrBroken) {
		t.Fatalf("Commit error %v, want ErrBroken", err)
	}
	inj.Off()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := open.Load(); n != 0 {
		t.Fatalf("%d commit-log segment files left open by Close", n)
	}
}

// TestStalledCommitWokenByBackgroundFailure: a commit waiting for flushes
// to catch up returns once Pebble's background work failed (the flush it
// waits for may never end then), instead of holding Close up for ever.
func TestStalledCommitWokenByBackgroundFailure(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.Contains(op.Path, ingestPrefix) {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil
	})
	s := mustOpen(t, "db", Options{FS: errorfs.Wrap(vfs.NewMem(), inj), memLimit: 1})
	done := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 2*maxFrozen+2 && err == nil; i++ {
			_, err = crashBatch(s, i, 10) // each freezes a memtable
		}
		done <- err
	}()
	<-entered
	for s.frozenCount() <= maxFrozen {
		runtime.Gosched()
	}
	s.lg.failBackground(errors.New("injected background failure"))
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrBroken) {
			t.Fatalf("commit: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a stalled commit still waits after Pebble's background work failed")
	}
	close(release)
	_ = s.Close()
}

// committedThrough returns the last batch a reopened store's checkpoint
// "cp-N" names (-1 for none) and the checkpoint, failing t (what names the
// run) if the checkpoint cannot be read, names a batch before minDone-1
// (one whose commit had returned) or disagrees with CommitSeq.
func committedThrough(t *testing.T, s *Store, minDone int, what string) (last int, cp []byte) {
	t.Helper()
	if what != "" {
		what += ": "
	}
	cp, err := s.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	last = -1
	if cp != nil {
		if _, err := fmt.Sscanf(string(cp), "cp-%d", &last); err != nil {
			t.Fatalf("%scheckpoint %q: %v", what, cp, err)
		}
	}
	if last < minDone-1 {
		t.Fatalf("%scheckpoint %q after crash, but batch %d had committed", what, cp, minDone-1)
	}
	if s.CommitSeq() != uint64(last+1) {
		t.Fatalf("%sCommitSeq %d with checkpoint %q", what, s.CommitSeq(), cp)
	}
	return last, cp
}
