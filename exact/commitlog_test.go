package exact

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/dchest/siphash"
)

// testRecord encodes a commit-log record of seq with one key.
func testRecord(seq, seg uint64) []byte {
	b := &Batch{}
	b.ents = append(b.ents, ent{gen: 1, fp: testFP(int(seq))})
	b.logHash(1, hashOf(int(seq)))
	rec := encodeRecord(nil, b)
	stampRecord(rec, seq, seg)
	return rec
}

// testFP is a fingerprint of keyOf(i), under a fixed secret.
func testFP(i int) Fingerprint {
	h0, h1 := siphash.Hash128(1, 2, keyOf(i))
	var fp Fingerprint
	binary.LittleEndian.PutUint64(fp[:], h0)
	binary.LittleEndian.PutUint64(fp[8:], h1)
	return fp
}

// readSeqs returns the seqs of the records of the file of segment seg.
func readSeqs(t *testing.T, fs vfs.FS, path string, seg uint64) ([]uint64, error) {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	err = readLogEntries(f, fi.Size(), seg, func(r *logEntry) error {
		if len(r.fps) != 1 || r.fps[0] != testFP(int(r.seq)) || r.hashes[0] != hashOf(int(r.seq)) {
			return fmt.Errorf("record %d holds %x", r.seq, r.fps)
		}
		seqs = append(seqs, r.seq)
		return nil
	})
	return seqs, err
}

// TestReusedSegment: a segment written over a retired one ends where its
// own records end, whatever the earlier use left after them, and goes on
// to the next segment only through its end marker.
func TestReusedSegment(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	g1, err := createSegment(fs, "d", 1, nil, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 5; seq++ {
		if _, _, err := g1.append(testRecord(seq, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := g1.append(endRecord(1)); err != nil {
		t.Fatal(err)
	}
	if err := g1.f.Close(); err != nil {
		t.Fatal(err)
	}
	if seqs, err := readSeqs(t, fs, g1.path, 1); err != nil || fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("segment 1: %v, %v", seqs, err)
	}
	if err := fs.Rename(g1.path, "d/"+freeName(1)); err != nil {
		t.Fatal(err)
	}
	g2, err := createSegment(fs, "d", 2, nil, "d/"+freeName(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	if g2.base == 0 {
		t.Fatal("a reused segment does not know its file's size")
	}
	if _, _, err := g2.append(testRecord(6, 2)); err != nil {
		t.Fatal(err)
	}
	seqs, err := readSeqs(t, fs, g2.path, 2)
	if !errors.Is(err, errTorn) || fmt.Sprint(seqs) != "[6]" {
		t.Fatalf("reused segment: %v, %v; want [6] and the end of the log", seqs, err)
	}
	if _, _, err := g2.append(endRecord(2)); err != nil {
		t.Fatal(err)
	}
	if seqs, err := readSeqs(t, fs, g2.path, 2); err != nil || fmt.Sprint(seqs) != "[6]" {
		t.Fatalf("reused segment with its end marker: %v, %v", seqs, err)
	}
}

// TestSegmentSyncsPrevious: the first fsync of a segment makes the one
// before it durable whole (its last records and end marker): a commit
// acknowledged in the new segment must not follow a lost one.
func TestSegmentSyncsPrevious(t *testing.T) {
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(mem, ""); err != nil {
		t.Fatal(err)
	}
	g1, err := createSegment(mem, "d", 1, nil, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g1.append(testRecord(1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g1.append(endRecord(1)); err != nil {
		t.Fatal(err)
	}
	g2, err := createSegment(mem, "d", 2, g1, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	off, _, err := g2.append(testRecord(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.syncThrough(off); err != nil {
		t.Fatal(err)
	}
	crash := mem.CrashClone(vfs.CrashCloneCfg{})
	if seqs, err := readSeqs(t, crash, "d/"+segName(1), 1); err != nil || fmt.Sprint(seqs) != "[1]" {
		t.Fatalf("segment 1 after a crash: %v, %v", seqs, err)
	}
	if seqs, err := readSeqs(t, crash, "d/"+segName(2), 2); !errors.Is(err, errTorn) || fmt.Sprint(seqs) != "[2]" {
		t.Fatalf("segment 2 after a crash: %v, %v", seqs, err)
	}
}

// TestRetiredSegmentRenamedDurably: once a segment is retired, a crash
// finds it under its free name only, so that a later reuse, which
// overwrites it, cannot leave a half-overwritten file under the old name
// to end the replay early.
func TestRetiredSegmentRenamedDurably(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := mustOpen(t, "db", Options{FS: mem, memLimit: 1})
	first := s.segNum
	commitRange(t, s, 1, 0, 10, []byte("a")) // freezes the first segment
	if err := s.flushAll(); err != nil {     // retires it
		t.Fatal(err)
	}
	crash := mem.CrashClone(vfs.CrashCloneCfg{})
	ls, err := crash.List("db")
	if err != nil {
		t.Fatal(err)
	}
	free := false
	for _, name := range ls {
		if name == segName(first) {
			t.Fatalf("retired segment %d still under its name after a crash: %v", first, ls)
		}
		free = free || name == freeName(first)
	}
	if !free {
		t.Fatalf("no retired segment to reuse after a crash: %v", ls)
	}
	mustClose(t, s)
}

// TestFlushWaitsForLog: a flush writes the keys of a commit to Pebble only
// once the commit's log record is durable. Here the commit's fsync is held
// up while its memtable is flushed; a crash when the flush records its
// commit state (after the ingestion) must find the batch whole or not at
// all, never its keys without its checkpoint.
func TestFlushWaitsForLog(t *testing.T) {
	mem := newCrashableFS()
	var armed, metaSeen atomic.Bool
	release := make(chan struct{})
	var crash *vfs.MemFS
	var once sync.Once
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() {
			return nil
		}
		switch {
		case (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) && strings.Contains(op.Path, segPrefix) && !metaSeen.Load():
			// The commit's fsync: wait for the flush to record the commit
			// state (or give up, when the flush itself waits for it).
			select {
			case <-release:
			case <-time.After(time.Second):
			}
		case op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasSuffix(op.Path, ".log"):
			once.Do(func() {
				metaSeen.Store(true)
				crash = mem.CrashClone(vfs.CrashCloneCfg{})
				close(release)
			})
		}
		return nil
	})
	s := mustOpen(t, "db", Options{FS: errorfs.Wrap(mem.FS(), inj), memLimit: 1})
	armed.Store(true)
	w := crashWorkload{total: 1, per: 50, genEvery: 10, memLimit: 1}
	if err := w.commit(s, 0); err != nil { // freezes: the flush starts at once
		t.Fatal(err)
	}
	if err := s.flushAll(); err != nil {
		t.Fatal(err)
	}
	armed.Store(false)
	mustClose(t, s)
	if crash == nil {
		t.Fatal("the flush recorded no commit state")
	}
	w.verify(t, crash, 0, 0, 0, "crash while the commit state is recorded")
}

// TestSegmentNumberNeverReissued: a crash that loses the directory entry
// of the only live segment (here the one Open creates, before any commit
// synced the directory) must not make the next Open number its segments
// from the start again: a retired file kept for reuse may hold records of
// a number given again, which a replay of the reused file would take for
// new ones. Every Open numbers its segments above every number a file or
// a record was written with.
func TestSegmentNumberNeverReissued(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := mustOpen(t, "db", Options{FS: mem, memLimit: 1})
	for i := 0; i < 4; i++ {
		commitRange(t, s, 1, 10*i, 10*i+10, []byte("a")) // a segment each
	}
	if err := s.flushAll(); err != nil {
		t.Fatal(err)
	}
	used := s.segNum
	mustClose(t, s)
	// Open replays, removes the live segments and creates a new one; a
	// crash before any commit loses that one's directory entry.
	s = mustOpen(t, "db", Options{FS: mem, memLimit: 1})
	crash := mem.CrashClone(vfs.CrashCloneCfg{})
	mustClose(t, s)
	ls, err := crash.List("db")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ls {
		if n, ok := parseSegName(name); ok {
			t.Fatalf("segment %d survived the crash: %v", n, ls)
		}
	}
	s = mustOpen(t, "db", Options{FS: crash, memLimit: 1})
	defer mustClose(t, s)
	for i := 0; i < 4; i++ {
		if s.segNum <= used {
			t.Fatalf("segment number %d given again after a crash (numbers up to %d were used)", s.segNum, used)
		}
		commitRange(t, s, 1, 100+10*i, 110+10*i, []byte("b"))
	}
	for i := 0; i < 40; i++ {
		if ok, err := s.Has(1, keyOf(i)); err != nil || !ok {
			t.Fatalf("key %d: %v, %v", i, ok, err)
		}
	}
}

// TestSegmentGrowsAhead: a new segment's file is extended with zeros half
// a chunk or more ahead of its records, a chunk at a time, so that its
// fsyncs overwrite allocated blocks; the records read back whole, ending
// at the zeros, and the growth append reports adds up to the file's size.
func TestSegmentGrowsAhead(t *testing.T) {
	fs, dir := vfs.Default, t.TempDir()
	const zeroChunk = maxZeroChunk
	g, err := createSegment(fs, dir, 1, nil, "", zeroChunk)
	if err != nil {
		t.Fatal(err)
	}
	defer g.f.Close()
	var grownSum int64
	var want []uint64
	rec := testRecord(1, 1)
	n := uint64(3*zeroChunk/len(rec) + 7)
	for seq := uint64(1); seq <= n; seq++ {
		end, grown, err := g.append(testRecord(seq, 1))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seq)
		grownSum += grown
		fi, err := fs.Stat(g.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < end+zeroChunk/2 || fi.Size()%zeroChunk != 0 {
			t.Fatalf("after %d records ending at %d the file is %d bytes: want a multiple of %d at least half of it ahead", seq, end, fi.Size(), zeroChunk)
		}
		if grownSum != fi.Size() {
			t.Fatalf("growth reported %d, file %d bytes", grownSum, fi.Size())
		}
	}
	got, err := readSeqs(t, fs, g.path, 1)
	if !errors.Is(err, errTorn) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read back %d records (%v), want %d ending torn", len(got), err, len(want))
	}
	// A file in memory has no journal to spare: no zeros.
	mem := vfs.NewMem()
	m, err := createSegment(mem, "", 2, nil, "", zeroChunk)
	if err != nil || m.chunk != 0 {
		t.Fatalf("a segment in memory grows by chunks of %d (%v)", m.chunk, err)
	}
}

// TestCleanCloseEmptiesLog: a clean Close puts every commit into Pebble
// and leaves the commit log empty at rest (no records, no zeros ahead of
// them); the next Open finds every key, and its first segment takes the
// name of none the last run used.
func TestCleanCloseEmptiesLog(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	commitRange(t, s, 1, 0, 100, nil)
	first := s.seg.num
	mustClose(t, s)
	ls, err := vfs.Default.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logBytes int64
	for _, name := range ls {
		if strings.HasPrefix(name, segPrefix) {
			fi, err := vfs.Default.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			logBytes += fi.Size()
		}
	}
	if logBytes != 0 {
		t.Fatalf("commit log files %v hold %d bytes after a clean Close, want 0", ls, logBytes)
	}
	s = mustOpen(t, dir, Options{})
	defer mustClose(t, s)
	for i := 0; i < 100; i++ {
		if ok, err := s.Has(1, keyOf(i)); err != nil || !ok {
			t.Fatalf("Has(1, %s) after a clean Close and Open = %v, %v", keyOf(i), ok, err)
		}
	}
	commitRange(t, s, 1, 100, 200, nil)
	if s.seg.num == first {
		t.Fatalf("segment %d named again by the next Open", first)
	}
}

// TestZerosAreOptional: a segment whose zeros cannot be written (a disk
// with less than a chunk free) goes on appending its records: no commit
// fails, and every one is there after a reopen.
func TestZerosAreOptional(t *testing.T) {
	var refused atomic.Int64
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileWriteAt && strings.Contains(op.Path, segPrefix) && op.Offset == maxZeroChunk {
			refused.Add(1)
			return errors.New("no space left on device")
		}
		return nil
	})
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{FS: errorfs.Wrap(vfs.Default, inj)})
	const n, per = 40, 2000 // about 2 MiB of log records: past the refused chunk
	for i := range n {
		commitRange(t, s, 1, i*per, (i+1)*per, nil)
	}
	if refused.Load() == 0 || !s.seg.noZeros || s.seg.written.Load() <= maxZeroChunk {
		t.Fatalf("refused %d writes, noZeros %v, %d bytes written: the test did not reach the refused chunk", refused.Load(), s.seg.noZeros, s.seg.written.Load())
	}
	mustClose(t, s)
	s = mustOpen(t, dir, Options{})
	defer mustClose(t, s)
	for _, i := range []int{0, n*per/2 + 1, n*per - 1} {
		if ok, err := s.Has(1, keyOf(i)); err != nil || !ok {
			t.Fatalf("key %d after the reopen: %v, %v", i, ok, err)
		}
	}
}
