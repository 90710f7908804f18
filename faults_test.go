package dedup_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/streamdedup/dedup/internal/testclock"
)

var faultsMax = flag.Int("faults.max", 0, "if positive, try only the first n operations of each scenario in TestFaultInjection")

// faultInjector fails the n-th operation it sees while armed. In sticky mode
// (a full disk) every write from the n-th on fails until it is disarmed.
type faultInjector struct {
	mu     sync.Mutex
	armed  bool
	writes bool // count (and fail) write operations only
	sticky bool
	target int
	seen   int
	fired  int
	err    error
	ops    []string // the operations that failed, for messages
}

func (in *faultInjector) MaybeError(op errorfs.Op) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.armed {
		return nil
	}
	if inBackground() || (in.writes && op.Kind.ReadOrWrite() != errorfs.OpIsWrite) {
		return nil
	}
	i := in.seen
	in.seen++
	if i == in.target || (in.sticky && i > in.target) {
		in.fired++
		if len(in.ops) < 4 {
			in.ops = append(in.ops, fmt.Sprintf("#%d %v %s", i, op.Kind, op.Path))
		}
		return in.err
	}
	return nil
}

// inBackground reports whether the caller runs in one of Pebble's
// background flushes, compactions or table-statistics scans. The injector
// does not count those operations: they interleave with the call under test
// at random, and counting them would make "the n-th operation" a different
// one on every run. Faults there are TestFaultBackground's.
func inBackground() bool {
	var pcs [128]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "pebble/v2.(*DB).flush") || strings.Contains(f.Function, "pebble/v2.(*DB).compact") ||
			strings.Contains(f.Function, "pebble/v2.(*DB).collectTableStats") {
			return true
		}
		if !more {
			return false
		}
	}
}

func (in *faultInjector) String() string { return "faultInjector" }

func (in *faultInjector) arm(target int) {
	in.mu.Lock()
	in.armed, in.target, in.seen, in.fired, in.ops = true, target, 0, 0, nil
	in.mu.Unlock()
}

// disarm stops injecting and reports how many faults fired and how many
// operations were counted.
func (in *faultInjector) disarm() (fired, seen int, ops []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.armed = false
	return in.fired, in.seen, in.ops
}

// errNoSpace is a full disk as the OS reports it.
func errNoSpace(path string) error {
	return &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
}

type faultKind struct {
	name   string
	err    error
	writes bool
	sticky bool
	is     func(error) bool
}

var faultKinds = []faultKind{
	{name: "EIO", err: errorfs.ErrInjected, is: func(err error) bool { return errors.Is(err, errorfs.ErrInjected) }},
	{name: "ENOSPC", err: errNoSpace("disk"), writes: true, sticky: true, is: func(err error) bool { return errors.Is(err, syscall.ENOSPC) }},
}

// faultState is a small state with keys committed ("a" keys, checkpoint
// "1") and keys in flight ("b" keys).
type faultState struct {
	mem   *vfs.MemFS
	inj   *faultInjector
	clk   *testclock.Clock
	opts  Options
	e     *Engine
	aKeys []string
	bKeys []string
}

const faultW = time.Minute

func faultSetup(t *testing.T, inj *faultInjector, prob, rotate bool) *faultState {
	t.Helper()
	s := &faultState{mem: vfs.NewCrashableMem(), inj: inj, clk: testclock.New(t0)}
	s.opts = Options{Dir: "/f", FS: errorfs.Wrap(s.mem, inj), Probabilistic: prob, Now: s.clk.Now,
		Window: faultW, Generations: 4, Shards: 2, ExpectedRate: 20}
	var err error
	if s.e, err = Open(s.opts); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 3; g++ { // three generations of committed keys
		for i := 0; i < 10; i++ {
			k := fmt.Sprintf("a%d-%d", g, i)
			mustObserve(t, s.e, k, New)
			s.aKeys = append(s.aKeys, k)
		}
		mustCommit(t, s.e, "")
		s.clk.Advance(faultW / 4)
	}
	mustCommit(t, s.e, "1")
	if err := s.e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if rotate {
		// Past every generation: the next Commit range-deletes them all.
		s.clk.Advance(3 * faultW)
	}
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("b-%d", i)
		mustObserve(t, s.e, k, New)
		s.bKeys = append(s.bKeys, k)
	}
	return s
}

// verify opens the state on fs without faults and checks what Commit
// promised: the "a" keys are there (or expired, after a rotation), the
// checkpoint is one of allowed, and the "b" keys are there exactly when the
// checkpoint says their commit is.
func (s *faultState) verify(t *testing.T, what string, fs vfs.FS, rotated bool, allowed ...string) string {
	t.Helper()
	o := s.opts
	o.FS = fs
	e, err := Open(o)
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer func() { _ = e.Close() }()
	cp := string(e.Checkpoint())
	ok := false
	for _, a := range allowed {
		ok = ok || cp == a
	}
	if !ok {
		t.Fatalf("%s: Checkpoint %q, want one of %q", what, cp, allowed)
	}
	wantA := Duplicate
	if rotated {
		wantA = New
	}
	for _, k := range s.aKeys {
		if v, err := e.Observe([]byte(k)); err != nil || v != wantA {
			t.Fatalf("%s: committed key %q: %v, %v; want %v", what, k, v, err, wantA)
		}
	}
	wantB := New
	if cp != "1" {
		wantB = Duplicate
	}
	for _, k := range s.bKeys {
		if v, err := e.Observe([]byte(k)); err != nil || v != wantB {
			t.Fatalf("%s: key %q of the commit of checkpoint %q: %v, %v; want %v (checkpoint %q)", what, k, "2", v, err, wantB, cp)
		}
	}
	return cp
}

// TestFaultInjection injects an I/O error (EIO, once) or a full disk
// (ENOSPC, every write from then on) at the n-th file-system operation, for
// every n, of a Commit, of a Commit that rotates (range-deletes every
// expired generation), of a Snapshot and of an Open. Each time:
//   - the error reaches the caller, wrapping the injected cause;
//   - what the call reported as committed survives a crash at that moment
//     (a CrashClone keeping no unsynced data), and a failed Commit is atomic;
//   - with the fault cleared the engine either keeps working (no wrong
//     verdict, a retried Commit succeeds) or refuses every call with an
//     error, never a wrong verdict or a panic;
//   - Close and Open on the same files recover everything committed.
func TestFaultInjection(t *testing.T) {
	scenarios := []string{"commit", "rotate", "snapshot", "open"}
	for _, fk := range faultKinds {
		for _, prob := range []bool{false, true} {
			for _, sc := range scenarios {
				t.Run(fmt.Sprintf("%s/%s/prob=%v", fk.name, sc, prob), func(t *testing.T) {
					t.Parallel()
					var broken, refused, n int
					for n = 0; *faultsMax <= 0 || n < *faultsMax; n++ {
						res, done := faultAt(t, fk, sc, prob, n)
						if done {
							break
						}
						switch res {
						case "broken":
							broken++
						case "refused":
							refused++
						}
					}
					t.Logf("%d operations; after the fault cleared: %d broken (refused until reopened), %d refused open", n, broken, refused)
				})
			}
		}
	}
}

// faultAt runs one scenario with the fault at operation n. done reports
// that n is past the last operation of the call under test.
func faultAt(t *testing.T, fk faultKind, sc string, prob bool, n int) (result string, done bool) {
	inj := &faultInjector{err: fk.err, writes: fk.writes, sticky: fk.sticky}
	rotated := sc == "rotate"
	s := faultSetup(t, inj, prob, rotated)
	what := fmt.Sprintf("%s %s prob=%v n=%d", fk.name, sc, prob, n)
	defer func() {
		if s.e != nil {
			_ = s.e.Close()
		}
	}()

	if sc == "open" {
		mustCommit(t, s.e, "2")
		if err := s.e.Close(); err != nil {
			t.Fatal(err)
		}
		s.e = nil
		inj.arm(n)
		e, err := Open(s.opts)
		fired, _, ops := inj.disarm()
		if fired == 0 {
			if err != nil {
				t.Fatalf("%s: Open without a fault: %v", what, err)
			}
			_ = e.Close()
			return "", true
		}
		if err != nil {
			switch {
			case fk.is(err):
			default:
				t.Errorf("%s: Open error does not wrap the injected fault (%v): %v", what, ops, err)
			}
			result = "refused"
		} else {
			// Open coped with the fault: it must have lost nothing.
			s.e = e
			for _, k := range append(append([]string{}, s.aKeys...), s.bKeys...) {
				if v, err := e.Observe([]byte(k)); err != nil || v != Duplicate {
					t.Fatalf("%s: Open survived a fault (%v) but committed key %q is %v, %v", what, ops, k, v, err)
				}
			}
			if cp := string(e.Checkpoint()); cp != "2" {
				t.Fatalf("%s: Open survived a fault (%v) with Checkpoint %q", what, ops, cp)
			}
			_ = e.Close()
			s.e = nil
		}
		s.verify(t, what+": clean reopen", s.mem, false, "2")
		return result, false
	}

	inj.arm(n)
	var err error
	if sc == "snapshot" {
		err = s.e.Snapshot()
	} else {
		err = s.e.Commit([]byte("2"))
	}
	fired, _, ops := inj.disarm()
	if fired == 0 {
		if err != nil {
			t.Fatalf("%s: no fault, yet: %v", what, err)
		}
		return "", true
	}
	if err != nil && !fk.is(err) {
		t.Errorf("%s: error does not wrap the injected fault (%v): %v", what, ops, err)
	}
	committed := err == nil && sc != "snapshot"
	if sc == "snapshot" {
		committed = false
	}
	// A crash right now keeps what the call promised.
	crash := s.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	switch {
	case committed:
		s.verify(t, what+": crash after Commit returned", crash, rotated, "2")
	case sc == "snapshot":
		s.verify(t, what+": crash after Snapshot failed", crash, rotated, "1")
	default:
		// A failed commit may or may not have reached the disk, but
		// atomically (verify checks the keys match the checkpoint).
		s.verify(t, what+": crash after Commit failed", crash, rotated, "1", "2")
	}

	// The fault has cleared: the engine keeps working, or refuses.
	result = "working"
	wantA := Duplicate
	if rotated {
		wantA = New
	}
	for _, k := range s.aKeys {
		v, err := s.e.Observe([]byte(k))
		if err != nil {
			result = "broken"
			continue
		}
		if v != wantA {
			t.Fatalf("%s: after the fault, committed key %q is %v, want %v", what, k, v, wantA)
		}
		if v == New { // expired: release it again
			if err := s.e.Forget([]byte(k)); err != nil {
				t.Fatalf("%s: Forget(%q): %v", what, k, err)
			}
		}
	}
	wantB := InFlight // a failed commit puts its keys back in flight
	if committed {
		wantB = Duplicate
	}
	for _, k := range s.bKeys {
		v, err := s.e.Observe([]byte(k))
		if err != nil {
			result = "broken"
			continue
		}
		if v != wantB {
			t.Fatalf("%s: after the fault, key %q is %v, want %v", what, k, v, wantB)
		}
	}
	cerr := s.e.Commit([]byte("3"))
	if cerr != nil {
		result = "broken"
		// Refusing is fine, but every later commit must refuse too
		// rather than pretend.
		if err := s.e.Commit([]byte("4")); err == nil {
			t.Fatalf("%s: Commit failed after the fault cleared (%v), then the next one succeeded", what, cerr)
		}
	} else {
		for _, k := range s.bKeys {
			if v, err := s.e.Observe([]byte(k)); err != nil || v != Duplicate {
				t.Fatalf("%s: after a successful retry, %q is %v, %v", what, k, v, err)
			}
		}
		if cp := string(s.e.Checkpoint()); cp != "3" {
			t.Fatalf("%s: Checkpoint %q after the retry", what, cp)
		}
	}
	if result == "working" && sc != "snapshot" {
		if err := s.e.Snapshot(); err != nil {
			t.Fatalf("%s: Snapshot after the fault cleared: %v", what, err)
		}
	}
	_ = s.e.Close() // may report the earlier failure
	s.e = nil
	if cerr == nil {
		s.verify(t, what+": reopen", s.mem, rotated, "3")
	} else if committed {
		s.verify(t, what+": reopen", s.mem, rotated, "2")
	} else {
		s.verify(t, what+": reopen", s.mem, rotated, "1", "2")
	}
	return result, false
}

// TestFaultOpenIOErrorIsNotOurs: an I/O error while Open inspects the state
// directory must surface as that error, not as ErrNotOurs ("holds files
// that are not an exact store"), which tells the operator the directory
// belongs to another program.
func TestFaultOpenIOErrorIsNotOurs(t *testing.T) {
	for _, kind := range []errorfs.OpKind{errorfs.OpList, errorfs.OpOpen, errorfs.OpFileRead, errorfs.OpStat, errorfs.OpOpenDir} {
		mem := vfs.NewMem()
		var on atomic.Bool
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if on.Load() && op.Kind == kind && !strings.HasSuffix(op.Path, "LOCK") {
				return errorfs.ErrInjected
			}
			return nil
		})
		o := Options{Dir: "/f", FS: errorfs.Wrap(mem, inj)}
		e, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		mustObserve(t, e, "k", New)
		mustCommit(t, e, "1")
		_ = e.Close()
		on.Store(true)
		if _, err = Open(o); err == nil {
			continue // this operation kind is not used by Open
		}
		if errors.Is(err, ErrNotOurs) || !errors.Is(err, errorfs.ErrInjected) {
			t.Errorf("%v error during Open: %v; want the injected error, not ErrNotOurs", kind, err)
		}
	}
}

// backgroundEnv makes TestFaultBackground's child run a scenario.
const backgroundEnv = "DEDUP_RELIABILITY_BACKGROUND"

// TestFaultBackgroundChild is the child of TestFaultBackground. Each round
// builds a state in a fresh directory with a commit log to replay, opens it
// with a fault in the scenario's place, uses it, then opens the state as
// the next process would see it (a CrashClone of what was synced) and
// checks that every committed key is there. It prints OK if the process
// survived every round.
func TestFaultBackgroundChild(t *testing.T) {
	scenario := os.Getenv(backgroundEnv)
	if scenario == "" {
		return
	}
	mem := vfs.NewCrashableMem()
	var on atomic.Bool
	var fired atomic.Int64
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !on.Load() {
			return nil
		}
		switch scenario {
		case "background-manifest":
			// A MANIFEST write of a background flush (Open flushes the
			// WAL it replays): fatal to Pebble.
			if inBackground() && strings.Contains(op.Path, "MANIFEST") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
				fired.Add(1)
				return errorfs.ErrInjected
			}
		case "open-after-flush":
			// pebble.Open creating its new WAL, once that flush has run.
			if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".log") {
				fired.Add(1)
				return errorfs.ErrInjected
			}
		}
		return nil
	})
	fail := func(format string, args ...any) {
		fmt.Printf(format+"\n", args...)
		os.Exit(2)
	}
	for i := 0; i < 20; i++ {
		o := Options{Dir: fmt.Sprintf("/k%d", i), FS: errorfs.Wrap(mem, inj), Shards: 2}
		e, err := Open(o)
		if err != nil {
			fail("setup: %v", err)
		}
		var keys [][]byte
		for j := 0; j < 50; j++ {
			k := fmt.Appendf(nil, "%d-%d", i, j)
			keys = append(keys, k)
			if v, err := e.Observe(k); err != nil || v != New {
				fail("setup: Observe %q: %v, %v", k, v, err)
			}
		}
		if err := e.Commit([]byte("1")); err != nil {
			fail("setup: Commit: %v", err)
		}
		if err := e.Close(); err != nil {
			fail("setup: Close: %v", err)
		}
		on.Store(true)
		fired.Store(0)
		e, err = Open(o)
		if err == nil {
			time.Sleep(20 * time.Millisecond)
			// The fault may have broken the store: errors, never a New
			// for a committed key.
			for _, k := range keys {
				if v, oerr := e.Observe(k); oerr == nil && v == New {
					fail("faulted store: committed key %q is New", k)
				}
			}
			err = e.Commit([]byte("2"))
			_ = e.Close()
		}
		time.Sleep(50 * time.Millisecond) // background goroutines run
		on.Store(false)
		if fired.Load() == 0 {
			fail("round %d: no fault was injected", i)
		}
		if err == nil {
			fail("round %d: no call reported the fault", i)
		}
		if !errors.Is(err, errorfs.ErrInjected) {
			fail("round %d: the error does not wrap the fault: %v", i, err)
		}

		o.FS = mem.CrashClone(vfs.CrashCloneCfg{})
		e, err = Open(o)
		if err != nil {
			fail("round %d: the next process cannot open the state: %v", i, err)
		}
		for _, k := range keys {
			if v, err := e.Observe(k); err != nil || v != Duplicate {
				fail("round %d: committed key %q after restart: %v, %v", i, k, v, err)
			}
		}
		if cp := string(e.Checkpoint()); cp != "1" && cp != "2" {
			fail("round %d: checkpoint %q after restart", i, cp)
		}
		_ = e.Close()
	}
	fmt.Println("OK")
	os.Exit(0)
}

// TestFaultBackground: a disk failure must not end the process, even where
// no call can return it. Each scenario runs in a child process, so that a
// panic on one of Pebble's goroutines fails the test instead of the suite:
//   - background-manifest: a failed MANIFEST write in Pebble's background
//     flush, which Pebble treats as fatal (exact/logger.go turns it into a
//     broken store, not a panic or an exit);
//   - open-after-flush: pebble.Open failing after its first flush, which
//     in Pebble v2.1.7 left a table-statistics goroutine to panic on a
//     closed table cache (exact disables table statistics).
//
// After each fault, the state as a restarted process sees it must hold
// every committed key.
func TestFaultBackground(t *testing.T) {
	for _, sc := range []string{"background-manifest", "open-after-flush"} {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFaultBackgroundChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), backgroundEnv+"="+sc)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "OK") {
				first := string(out)
				if i := strings.Index(first, "\ngoroutine "); i > 0 {
					first = first[:i]
				}
				t.Fatalf("the child failed (%v):\n%s", err, first)
			}
		})
	}
}
