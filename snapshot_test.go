package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/streamdedup/dedup/internal/faultfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

// stream drives an engine with a deterministic random stream: new keys and
// repeats, commits with checkpoints, the clock moving forward.
type stream struct {
	r       *rand.Rand
	clk     *testclock.Clock
	history []string
	i       int
}

func newStream(seed uint64, clk *testclock.Clock) *stream {
	return &stream{r: rand.New(rand.NewPCG(seed, 3)), clk: clk}
}

// run observes n events and commits every 50, returning the verdicts.
func (s *stream) run(t testing.TB, e *Engine, n int) []Verdict {
	t.Helper()
	var out []Verdict
	for j := 0; j < n; j++ {
		s.i++
		s.clk.Advance(time.Duration(s.r.Int64N(int64(50 * time.Millisecond))))
		var key string
		if len(s.history) == 0 || s.r.Float64() < 0.6 {
			key = fmt.Sprintf("k%d", s.i)
			s.history = append(s.history, key)
		} else {
			key = s.history[s.r.IntN(len(s.history))]
		}
		v, err := e.Observe([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
		if s.i%50 == 0 {
			if err := e.Commit([]byte(fmt.Sprint(s.i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestRestartEquivalence: observe a stream, commit, snapshot, close,
// reopen, continue: the verdicts equal those of an engine that never
// stopped, whether the reopen restores from a snapshot (plus the log after
// it) or rebuilds.
func TestRestartEquivalence(t *testing.T) {
	for _, prob := range []bool{false, true} {
		for _, kind := range []string{"bloom", "cuckoo", "blocked", "interleaved", "wide"} {
			t.Run(fmt.Sprintf("%s/prob=%v", kind, prob), func(t *testing.T) {
				o := Options{Filter: kind, Probabilistic: prob, Window: 20 * time.Second, Generations: 4, Shards: 4, ExpectedRate: 50}
				clkA, clkB := testclock.New(t0), testclock.New(t0)
				// Both states share one hash seed (b's directory is a copy
				// of a's), so even probabilistic false positives agree.
				oa := o
				oa.Now, oa.Dir = clkA.Now, t.TempDir()
				a := openT(t, oa)
				ob := o
				ob.Now, ob.Dir = clkB.Now, t.TempDir()+"/b"
				if err := os.CopyFS(ob.Dir, os.DirFS(oa.Dir)); err != nil {
					t.Fatal(err)
				}
				sa, sb := newStream(1, clkA), newStream(1, clkB)
				b := openT(t, ob)
				for round := 0; round < 6; round++ {
					va := sa.run(t, a, 1000)
					vb := sb.run(t, b, 1000)
					for i := range va {
						if va[i] != vb[i] {
							t.Fatalf("round %d event %d: never-stopped %v, restarted %v", round, i, va[i], vb[i])
						}
					}
					if round%2 == 0 {
						if err := b.Snapshot(); err != nil {
							t.Fatal(err)
						}
						sb.run(t, b, 0)
					}
					// Both commit, then b restarts.
					mustCommit(t, a, "")
					mustCommit(t, b, "")
					if err := b.Close(); err != nil {
						t.Fatal(err)
					}
					var err error
					if b, err = Open(ob); err != nil {
						t.Fatal(err)
					}
					want := RestoredSnapshot
					if got := b.Stats().RestoredFrom; got != want {
						t.Fatalf("round %d: restored from %q, want %q", round, got, want)
					}
				}
				_ = b.Close()
			})
		}
	}
}

// snapshotFiles lists the files of dir's snapshot folder.
func snapshotFiles(t testing.TB, fs vfs.FS, dir string) []string {
	names, err := fs.List(fs.PathJoin(dir, SnapshotDir))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// TestCorruptSnapshot: a damaged newest snapshot is reported and passed
// over: probabilistic mode restores from the previous one and the log
// after it; exact mode, whose log is truncated through the newest
// snapshot, rebuilds its filters from the store and says so in its log.
// With every snapshot damaged, exact mode rebuilds from the store and
// probabilistic mode refuses to start empty unless AllowEmptyRestore says
// so. Nothing committed is lost, and no committed key passes as New.
func TestCorruptSnapshot(t *testing.T) {
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprintf("prob=%v", prob), func(t *testing.T) {
			fs := vfs.NewMem()
			clk := testclock.New(t0)
			var logged logLines
			logf := logged.logf
			rebuiltLogged := func() bool {
				return len(logged.containing("rebuilding filters from the exact store")) > 0
			}
			// Snapshots only when the test writes them: Close writes none.
			o := Options{Dir: "/s", FS: fs, Probabilistic: prob, Now: clk.Now, Window: time.Hour, SnapshotInterval: -1, Logf: logf}
			e, err := Open(o)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				mustObserve(t, e, fmt.Sprint("key", i), New)
				mustCommit(t, e, fmt.Sprint(i))
				if err := e.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			mustObserve(t, e, "after-snapshots", New)
			mustCommit(t, e, "3")
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			flip := func(name string) {
				p := fs.PathJoin("/s", SnapshotDir, name)
				f, err := fs.OpenReadWrite(p, vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := f.Stat()
				b := make([]byte, 1)
				off := st.Size() / 2
				_, _ = f.ReadAt(b, off)
				b[0] ^= 0x40
				_, _ = f.WriteAt(b, off)
				_ = f.Close()
			}
			check := func(e *Engine) {
				t.Helper()
				for i := 0; i < 3; i++ {
					mustObserve(t, e, fmt.Sprint("key", i), Duplicate)
				}
				mustObserve(t, e, "after-snapshots", Duplicate)
				if got := string(e.Checkpoint()); got != "3" {
					t.Fatalf("checkpoint %q", got)
				}
			}
			var manifests []string
			for _, n := range snapshotFiles(t, fs, "/s") {
				if strings.HasSuffix(n, ".manifest") {
					manifests = append(manifests, n)
				}
			}
			if len(manifests) != 2 {
				t.Fatalf("manifests kept: %v", manifests)
			}
			flip(manifests[1]) // the newest
			e, err = Open(o)
			if err != nil {
				t.Fatal(err)
			}
			st := e.Stats()
			want := RestoredStore
			if prob {
				want = RestoredSnapshot
			}
			if st.RestoredFrom != want || len(st.RestoreProblems) == 0 {
				t.Fatalf("newest corrupt: restored from %q, want %q; problems %v", st.RestoredFrom, want, st.RestoreProblems)
			}
			if got := rebuiltLogged(); got != !prob {
				t.Fatalf("newest corrupt: log says the filters were rebuilt from the store: %v, want %v (log %q)", got, !prob, logged.all())
			}
			check(e)
			mustObserve(t, e, "new-after-restore", New)
			_ = e.Close()

			flip(manifests[0]) // now both are corrupt
			e, err = Open(o)
			if prob {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("probabilistic open with every snapshot corrupt: %v, want ErrCorrupt", err)
				}
				o.AllowEmptyRestore = true
				if e, err = Open(o); err != nil {
					t.Fatal(err)
				}
				if st := e.Stats(); st.RestoredFrom != RestoredEmpty {
					t.Fatalf("restored from %q", st.RestoredFrom)
				}
				_ = e.Close()
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st := e.Stats(); st.RestoredFrom != RestoredStore || len(st.RestoreProblems) == 0 {
				t.Fatalf("all corrupt: restored from %q, problems %v", st.RestoredFrom, st.RestoreProblems)
			}
			check(e)
			_ = e.Close()
		})
	}
}

// TestSnapshotTruncatesLog: after two snapshots, exact mode's commit log
// holds only the commits since the newest (the store holds every key, so
// a damaged newest snapshot is rebuilt from it), and probabilistic mode's
// the commits since the one before (its log is its only exact record, and
// the previous snapshot its fallback). The truncation mark says the same.
func TestSnapshotTruncatesLog(t *testing.T) {
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprintf("prob=%v", prob), func(t *testing.T) {
			clk := testclock.New(t0)
			e := openT(t, Options{Dir: t.TempDir(), Probabilistic: prob, Now: clk.Now, Window: time.Hour, SnapshotInterval: -1})
			var snapSeqs []uint64
			for round, n := range []int{100, 30} {
				for i := range n {
					mustObserve(t, e, fmt.Sprintf("r%d-%d", round, i), New)
				}
				mustCommit(t, e, fmt.Sprint(round))
				if err := e.Snapshot(); err != nil {
					t.Fatal(err)
				}
				snapSeqs = append(snapSeqs, LastCommitSeq(e))
			}
			for i := range 7 {
				mustObserve(t, e, fmt.Sprint("after-", i), New)
			}
			mustCommit(t, e, "after")
			wantMark, wantPairs := snapSeqs[1], 7
			if prob {
				wantMark, wantPairs = snapSeqs[0], 30+7
			}
			mark, err := LogTruncatedThrough(e)
			if err != nil {
				t.Fatal(err)
			}
			pairs, err := LogPairs(e)
			if err != nil {
				t.Fatal(err)
			}
			if mark != wantMark || pairs != wantPairs {
				t.Fatalf("log truncated through %d holding %d keys, want through %d holding %d (snapshots at %v)", mark, pairs, wantMark, wantPairs, snapSeqs)
			}
			// The state still opens from the newest snapshot and the log.
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openT(t, EngineOptions(e))
			defer e.Close()
			if got := e.Stats().RestoredFrom; got != RestoredSnapshot {
				t.Fatalf("reopened from %q, want %q", got, RestoredSnapshot)
			}
			mustObserve(t, e, "r0-0", Duplicate)
			mustObserve(t, e, "after-6", Duplicate)
		})
	}
}

// TestSnapshotFinalReuse: final generations (past, nothing in flight) are
// written once.
func TestSnapshotFinalReuse(t *testing.T) {
	clk := testclock.New(t0)
	e := openT(t, Options{Dir: t.TempDir(), Now: clk.Now, Window: 40 * time.Second, Generations: 4, Shards: 2})
	for g := 0; g < 4; g++ {
		for i := 0; i < 200; i++ {
			mustObserve(t, e, fmt.Sprintf("g%d-%d", g, i), New)
		}
		mustCommit(t, e, "")
		clk.Advance(10 * time.Second)
	}
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	first := e.Stats().LastSnapshotWritten
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	second := e.Stats().LastSnapshotWritten
	if second*3 > first {
		t.Fatalf("second snapshot wrote %d bytes, the first %d: final generations were rewritten", second, first)
	}
}

// TestSnapshotCrashAtEveryWrite crashes the machine at the k-th write
// operation of a Snapshot, for every k, keeping a random share of unsynced
// data: reopening always works and loses no committed key.
func TestSnapshotCrashAtEveryWrite(t *testing.T) {
	for _, prob := range []bool{false, true} {
		for k := 0; ; k++ {
			if !snapshotCrashAt(t, prob, k) {
				break
			}
		}
	}
}

func snapshotCrashAt(t *testing.T, prob bool, k int) bool {
	mem := vfs.NewCrashableMem()
	crash := faultfs.NewCrash(mem, errorfs.OnIndex(int32(k)),
		vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(k), 5))})
	inj := &errorfs.Toggle{Injector: crash}
	clk := testclock.New(t0)
	o := Options{Dir: "/s", FS: errorfs.Wrap(mem, inj), Probabilistic: prob, Now: clk.Now, Window: time.Minute, Generations: 4, Shards: 2}
	e, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for round := 0; round < 3; round++ {
		for i := 0; i < 100; i++ {
			key := fmt.Sprintf("r%d-%d", round, i)
			mustObserve(t, e, key, New)
			keys = append(keys, key)
		}
		mustCommit(t, e, fmt.Sprint(round))
		clk.Advance(15 * time.Second)
		if round == 0 {
			if err := e.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	inj.On()
	snapErr := e.Snapshot()
	c, _ := crash.Crashed()
	if c == nil {
		if snapErr != nil {
			t.Fatalf("snapshot without a crash: %v", snapErr)
		}
		_ = e.Close()
		return false
	}
	if snapErr == nil {
		t.Fatalf("k=%d: the crash did not surface from Snapshot", k)
	}
	_ = e.Close()
	o.FS = c
	e2, err := Open(o)
	if err != nil {
		t.Fatalf("prob=%v k=%d: reopen after a crash during Snapshot: %v", prob, k, err)
	}
	defer e2.Close()
	for _, key := range keys {
		mustObserve(t, e2, key, Duplicate)
	}
	if got := string(e2.Checkpoint()); got != "2" {
		t.Fatalf("k=%d: checkpoint %q", k, got)
	}
	return true
}

// TestSnapshotIOError injects an I/O error at each write operation of a
// Snapshot to its folder: the error surfaces, the engine keeps
// deduplicating and committing, and the next Snapshot (fault cleared)
// succeeds. (A write error in the store, as when the snapshot then
// truncates the log, breaks the store like any store write; the crash
// tests cover it.)
func TestSnapshotIOError(t *testing.T) {
	for k := 0; ; k++ {
		at := errorfs.OnIndex(int32(k))
		inSnapshots := pathPrefix("/s/" + SnapshotDir)
		inj := &errorfs.Toggle{Injector: faultfs.If(errorfs.And(errorfs.Writes, inSnapshots, at), errorfs.ErrInjected)}
		e := openT(t, Options{Dir: "/s", FS: errorfs.Wrap(vfs.NewMem(), inj), Shards: 2})
		mustObserve(t, e, "a", New)
		mustCommit(t, e, "1")
		inj.On()
		err := e.Snapshot()
		inj.Off()
		if err == nil {
			if at.Load() >= 0 { // not reached: fewer than k+1 writes
				return // k is past the last write of a Snapshot
			}
			t.Fatalf("k=%d: injected error swallowed", k)
		}
		if !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("k=%d: %v does not wrap the injected error", k, err)
		}
		if st := e.Stats(); st.SnapshotErrors != 1 || st.LastSnapshotError == "" {
			t.Fatalf("k=%d: stats %d %q", k, st.SnapshotErrors, st.LastSnapshotError)
		}
		mustObserve(t, e, "a", Duplicate)
		mustObserve(t, e, "b", New)
		mustCommit(t, e, "2")
		if err := e.Snapshot(); err != nil {
			t.Fatalf("k=%d: snapshot after the fault cleared: %v", k, err)
		}
		_ = e.Close()
	}
}

// pathPrefix is an errorfs predicate: the operation's path starts with p.
type pathPrefix string

func (p pathPrefix) String() string { return fmt.Sprintf("(PathPrefix %q)", string(p)) }

func (p pathPrefix) Evaluate(op errorfs.Op) bool { return strings.HasPrefix(op.Path, string(p)) }

// TestCloseSnapshotsAfterRecordsOnly: a state whose commits are only
// idempotency records (dedup proxy's) gets its snapshot at Close like any
// other, and the next Open restores it instead of rebuilding the filters
// from the store (and logging a rebuild that reads like damage).
func TestCloseSnapshotsAfterRecordsOnly(t *testing.T) {
	dir := t.TempDir()
	var logs []string
	o := Options{Dir: dir, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }}
	e := openT(t, o)
	ctx := context.Background()
	c, err := e.Begin(ctx, []byte("order-1"), []byte("fp"), time.Minute)
	if err != nil || c.State != ClaimNew {
		t.Fatalf("Begin = %+v, %v", c, err)
	}
	if err := e.Complete(ctx, []byte("order-1"), c.Token, []byte("charge ch_1")); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openT(t, o)
	defer e.Close()
	if got := e.Stats().RestoredFrom; got != RestoredSnapshot {
		t.Errorf("RestoredFrom = %q, want %q; log %q", got, RestoredSnapshot, logs)
	}
	c, err = e.Begin(ctx, []byte("order-1"), []byte("fp"), time.Minute)
	if err != nil || c.State != ClaimCompleted || string(c.Result) != "charge ch_1" {
		t.Errorf("Begin after the reopen = %+v, %v; want the stored result", c, err)
	}
}
