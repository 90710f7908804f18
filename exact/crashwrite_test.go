package exact

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// crashWorkload is the history TestCrashEveryWrite replays: batch i adds
// per keys of generation genOf(i), with checkpoint "cp-i", and puts or
// deletes a result record (see recordOps); the first batch
// of each generation drops the generations more than two below it; every
// fifth batch is followed by TruncateLog of the log three batches back,
// and every drop by a Reclaim. The memtable is tiny, so that commits
// rotate segments, reuse retired ones and flush all along.
type crashWorkload struct {
	total, per, genEvery int
	memLimit             int
}

func (w crashWorkload) genOf(i int) uint64 { return uint64(1 + i/w.genEvery) }

// dropOf is the drop of batch i (0: none).
func (w crashWorkload) dropOf(i int) uint64 {
	if i > 0 && i%w.genEvery == 0 && w.genOf(i) > 2 {
		return w.genOf(i) - 2
	}
	return 0
}

// floorThrough is the drop floor once batches 0..last are in.
func (w crashWorkload) floorThrough(last int) uint64 {
	var f uint64
	for i := 0; i <= last; i++ {
		f = max(f, w.dropOf(i))
	}
	return f
}

func (w crashWorkload) commit(s *Store, i int) error {
	b := s.NewBatch()
	for k := i * w.per; k < (i+1)*w.per; k++ {
		b.Add(w.genOf(i), keyOf(k), hashOf(k))
	}
	if d := w.dropOf(i); d > 0 {
		b.DropGenerationsBefore(d)
	}
	for _, op := range w.recordOps(i) {
		if op.del {
			b.DeleteRecord(op.gen, recordFP(s, op.key))
		} else {
			b.PutRecord(op.gen, recordFP(s, op.key), []byte(op.val))
		}
	}
	b.SetCheckpoint([]byte(fmt.Sprintf("cp-%d", i)))
	seq, err := b.Commit()
	if err == nil && seq != uint64(i+1) {
		return fmt.Errorf("batch %d got seq %d", i, seq)
	}
	return err
}

// recordKeys is the number of record keys the workload uses.
const recordKeys = 5

// workloadOp is a result-record operation of the workload.
type workloadOp struct {
	gen uint64
	key int
	val string
	del bool
}

// recordOps are the record operations of batch i: a put of record key
// i%recordKeys in generation genOf(i), and in every third batch the delete
// of another key's record in the same generation.
func (w crashWorkload) recordOps(i int) []workloadOp {
	ops := []workloadOp{{gen: w.genOf(i), key: i % recordKeys, val: fmt.Sprintf("rec-%d", i)}}
	if i%3 == 2 {
		ops = append(ops, workloadOp{gen: w.genOf(i), key: (i + 2) % recordKeys, del: true})
	}
	return ops
}

// wantRecords returns, for each record key, the value GetRecord must find
// once batches 0..last are in ("" for none).
func (w crashWorkload) wantRecords(last int) []string {
	type gk struct {
		gen uint64
		key int
	}
	state := map[gk]string{}
	for i := 0; i <= last; i++ {
		for _, op := range w.recordOps(i) {
			if op.del {
				delete(state, gk{op.gen, op.key})
			} else {
				state[gk{op.gen, op.key}] = op.val
			}
		}
	}
	floor := w.floorThrough(last)
	want := make([]string, recordKeys)
	newest := make([]uint64, recordKeys)
	for k, v := range state {
		if k.gen >= floor && (want[k.key] == "" || k.gen > newest[k.key]) {
			want[k.key], newest[k.key] = v, k.gen
		}
	}
	return want
}

// recordFP is the fingerprint of the workload's record key k.
func recordFP(s *Store, k int) Fingerprint {
	return s.Fingerprint([]byte(fmt.Sprintf("record-%d", k)))
}

// checkRecords checks that s holds the records of batches 0..last.
func (w crashWorkload) checkRecords(t *testing.T, s *Store, last int, what string) {
	t.Helper()
	for k, want := range w.wantRecords(last) {
		_, v, ok, err := s.GetRecord(recordFP(s, k))
		if err != nil {
			t.Fatalf("%s: GetRecord(%d): %v", what, k, err)
		}
		if string(v) != want || ok != (want != "") {
			t.Fatalf("%s: record %d = %q (found %v), want %q, through batch %d", what, k, v, ok, want, last)
		}
	}
}

// progress is how far run got: batches committed, the last TruncateLog
// called and the last that returned.
type progress struct {
	done, truncReq, truncated atomic.Int64
}

// run commits the batches from 0, with the truncations and reclaims,
// reporting each step to p. It stops at the first error.
func (w crashWorkload) run(s *Store, p *progress) error {
	for i := 0; i < w.total; i++ {
		if err := w.commit(s, i); err != nil {
			return err
		}
		p.done.Store(int64(i + 1))
		if i%5 == 4 && i >= 3 {
			p.truncReq.Store(int64(i + 1 - 3))
			if err := s.TruncateLog(uint64(i + 1 - 3)); err != nil {
				return err
			}
			p.truncated.Store(int64(i + 1 - 3))
		}
		if w.dropOf(i) > 0 {
			if err := s.Reclaim(context.Background()); err != nil {
				return err
			}
		}
	}
	return nil
}

// verify opens the state in fs and checks it against the contract: the
// batches present are exactly 0..c for the checkpoint "cp-c", with c at
// least minDone-1; their keys are there unless dropped; the log holds
// exactly the entries of the batches past a truncation mark between
// minTrunc (the last TruncateLog that returned) and maxTrunc (the last
// called). Then the store takes more commits and reopens.
func (w crashWorkload) verify(t *testing.T, fs vfs.FS, minDone, minTrunc, maxTrunc int, what string) {
	t.Helper()
	o := Options{FS: fs, memLimit: w.memLimit}
	s, err := Open("db", o)
	if err != nil {
		t.Fatalf("%s: reopen after crash: %v", what, err)
	}
	last, cp := committedThrough(t, s, minDone, what)
	floor := w.floorThrough(last)
	if s.DroppedBefore() != floor {
		t.Fatalf("%s: DroppedBefore %d, want %d (checkpoint %q)", what, s.DroppedBefore(), floor, cp)
	}
	w.checkRecords(t, s, last, what)
	// Three keys of each batch (ScanFingerprints counts them all below).
	for i := 0; i < w.total; i++ {
		want := i <= last && w.genOf(i) >= floor
		for _, k := range []int{i * w.per, i*w.per + w.per/2, (i+1)*w.per - 1} {
			ok, err := s.Has(w.genOf(i), keyOf(k))
			if err != nil {
				t.Fatal(err)
			}
			if ok != want {
				t.Fatalf("%s: batch %d key %d present=%v, checkpoint %q", what, i, k, ok, cp)
			}
		}
	}
	nkeys := 0
	if err := s.ScanFingerprints(0, func(gen uint64, _ Fingerprint) error {
		nkeys++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantKeys := 0
	for i := 0; i <= last; i++ {
		if w.genOf(i) >= floor {
			wantKeys += w.per
		}
	}
	if nkeys != wantKeys {
		t.Fatalf("%s: ScanFingerprints found %d keys, want %d", what, nkeys, wantKeys)
	}
	// The log: the entries of the batches kept (not dropped), in order,
	// from some truncation mark on, at most minTrunc.
	var kept []int
	for i := 0; i <= last; i++ {
		if w.genOf(i) >= floor {
			kept = append(kept, i)
		}
	}
	var got []int // batch of each entry
	if err := s.ScanLog(0, func(seq, gen, hash uint64) error {
		i := int(seq) - 1
		k := i*w.per + countOf(got, i)
		if gen != w.genOf(i) || hash != hashOf(k) {
			return fmt.Errorf("log entry (seq %d gen %d hash %x), want key %d of gen %d", seq, gen, hash, k, w.genOf(i))
		}
		got = append(got, i)
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var gotBatches []int
	for j, i := range got {
		if j == 0 || got[j-1] != i {
			gotBatches = append(gotBatches, i)
		}
	}
	if len(got) != len(gotBatches)*w.per {
		t.Fatalf("%s: the log holds %d entries for %d batches", what, len(got), len(gotBatches))
	}
	suffix := kept[len(kept)-min(len(kept), len(gotBatches)):]
	if fmt.Sprint(gotBatches) != fmt.Sprint(suffix) {
		t.Fatalf("%s: the log holds batches %v, not a suffix of %v", what, gotBatches, kept)
	}
	for _, i := range kept[:len(kept)-len(suffix)] {
		if i+1 > maxTrunc {
			t.Fatalf("%s: the log lacks batch %d, but only seqs <= %d were truncated", what, i, maxTrunc)
		}
	}
	if len(suffix) > 0 && suffix[0]+1 <= minTrunc {
		t.Fatalf("%s: the log holds batch %d, truncated through seq %d", what, suffix[0], minTrunc)
	}
	// The clone goes on: a commit, a reopen.
	if err := w.commit(s, last+1); err != nil {
		t.Fatalf("%s: commit after crash: %v", what, err)
	}
	mustClose(t, s)
	s = mustOpen(t, "db", o)
	if cp, _ := s.Checkpoint(); string(cp) != fmt.Sprintf("cp-%d", last+1) {
		t.Fatalf("%s: checkpoint %q after a commit and a reopen, want cp-%d", what, cp, last+1)
	}
	mustClose(t, s)
}

// TestCrashEveryWrite crashes the store at its k-th file write (data,
// sync, rename, create, remove...), for every k, while it commits, rotates
// and reuses commit-log segments, flushes, truncates the log and reclaims
// dropped generations, like Pebble's TestDBWALRotationCrash: the crash
// keeps what was synced (and, in a second pass, a random part of the
// rest), and the reopened state must hold every batch whose Commit
// returned, all-or-nothing and in order.
func TestCrashEveryWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    crashWorkload
		pct  int
	}{
		// A segment per commit.
		{"segment-per-commit/unsynced=0", crashWorkload{total: 24, per: 30, genEvery: 6, memLimit: 4096}, 0},
		{"segment-per-commit/unsynced=50", crashWorkload{total: 24, per: 30, genEvery: 6, memLimit: 4096}, 50},
		// Several commits per segment.
		{"segments/unsynced=50", crashWorkload{total: 24, per: 100, genEvery: 6, memLimit: 48 << 10}, 50},
	} {
		w, pct := tc.w, tc.pct
		t.Run(tc.name, func(t *testing.T) {
			crashes := crashAtEveryWrite(t, w, pct)
			t.Logf("%d crash points", crashes)
			if crashes < 50 {
				t.Fatalf("only %d crash points: the workload does not flush", crashes)
			}
		})
	}
}

// crashPoint is the state of a crash at one write: the files as a crash
// would leave them, and how far the workload had got.
type crashPoint struct {
	fs                        *vfs.MemFS
	done, truncated, truncReq int
}

// crashAtEveryWrite runs w once and clones the files as a crash would
// leave them at every write, verifying each clone while the run goes on
// (a write waits while crashAtEveryWrite verifies the clones before it,
// so the clones in memory stay few). It returns the number of crash
// points.
func crashAtEveryWrite(t *testing.T, w crashWorkload, pct int) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(pct), 11))
	mem := newCrashableFS()
	var p progress
	points := make(chan crashPoint, 4)
	stop := make(chan struct{})
	defer close(stop)
	var mu sync.Mutex // the RNG and the clone order
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		mu.Lock()
		c := crashPoint{done: int(p.done.Load()), truncated: int(p.truncated.Load()), truncReq: int(p.truncReq.Load())}
		c.fs = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng})
		select {
		case points <- c:
		case <-stop:
		}
		mu.Unlock()
		return nil
	})
	runErr := make(chan error, 1)
	go func() {
		s, err := Open("db", Options{FS: errorfs.Wrap(mem.FS(), inj), memLimit: w.memLimit})
		if err == nil {
			err = w.run(s, &p)
			err = errors.Join(err, s.Close())
		}
		runErr <- err
		close(points)
	}()
	k := 0
	for c := range points {
		w.verify(t, c.fs, c.done, c.truncated, c.truncReq, fmt.Sprintf("crash at write %d", k))
		k++
	}
	if err := <-runErr; err != nil {
		t.Fatalf("the workload: %v", err)
	}
	return k
}

// TestCrashDuringReplay crashes Open at its k-th write, for every k, while
// it replays a commit log (rotated segments, a reused one, unflushed
// commits) and flushes it: the next Open still finds every committed
// batch.
func TestCrashDuringReplay(t *testing.T) {
	w := crashWorkload{total: 24, per: 30, genEvery: 6, memLimit: 4096}
	for k := int32(0); ; k++ {
		mem := newCrashableFS()
		var index atomic.Int32
		index.Store(math.MaxInt32)
		var crash *vfs.MemFS
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && index.Add(-1) == -1 {
				crash = mem.CrashClone(vfs.CrashCloneCfg{})
			}
			return nil
		})
		// A large memtable: the last commits stay in the log for Open.
		o := Options{FS: errorfs.Wrap(mem.FS(), inj), memLimit: 1 << 20}
		w.memLimit = 1 << 20
		s := mustOpen(t, "db", o)
		var p progress
		if err := w.run(s, &p); err != nil {
			t.Fatal(err)
		}
		mustClose(t, s)
		index.Store(k)
		s, err := Open("db", o)
		if err != nil {
			t.Fatalf("k=%d: Open: %v", k, err)
		}
		mustClose(t, s)
		if crash == nil {
			t.Logf("%d crash points", k)
			if k < 10 {
				t.Fatal("Open replayed nothing")
			}
			break
		}
		tr := int(p.truncated.Load())
		w.verify(t, crash, w.total, tr, tr, fmt.Sprintf("crash at write %d of Open", k))
	}
}

// countOf counts v in xs.
func countOf(xs []int, v int) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}
