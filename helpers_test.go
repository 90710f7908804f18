package dedup_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// Helpers shared by the black-box tests of package dedup.

// t0 is the tests' starting clock reading: a fixed instant, so that
// generation boundaries fall the same way in every run.
var t0 = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// forEachMode runs f as a subtest in exact mode and in probabilistic mode,
// named probabilistic=false and probabilistic=true.
func forEachMode(t *testing.T, f func(t *testing.T, prob bool)) {
	t.Helper()
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprintf("probabilistic=%v", prob), func(t *testing.T) { f(t, prob) })
	}
}

// openT opens an engine that the test closes when it ends.
func openT(t testing.TB, o Options) *Engine {
	t.Helper()
	e, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// reopen closes e and opens its state again with o; the test closes the
// new engine when it ends.
func reopen(t testing.TB, e *Engine, o Options) *Engine {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openT(t, o)
}

// mustObserve observes key and fails the test unless the verdict is want.
func mustObserve(t testing.TB, e *Engine, key string, want Verdict) {
	t.Helper()
	got, err := e.Observe([]byte(key))
	if err != nil {
		t.Fatalf("Observe(%q): %v", key, err)
	}
	if got != want {
		t.Fatalf("Observe(%q) = %v, want %v", key, got, want)
	}
}

// mustObserveEach observes keys in order and fails the test unless each
// gets want.
func mustObserveEach(t testing.TB, e *Engine, want Verdict, keys ...string) {
	t.Helper()
	for _, k := range keys {
		mustObserve(t, e, k, want)
	}
}

// mustDone calls e.Done(key) and fails the test on an error.
func mustDone(t testing.TB, e *Engine, key string) {
	t.Helper()
	if err := e.Done([]byte(key)); err != nil {
		t.Fatalf("Done(%s): %v", key, err)
	}
}

// wantErr fails the test unless errors.Is(err, want); what names the call
// that returned err.
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v, want %v", what, err, want)
	}
}

// mustCommit commits with checkpoint cp ("" for none), failing the test
// on an error.
func mustCommit(t testing.TB, e *Engine, cp string) {
	t.Helper()
	var b []byte
	if cp != "" {
		b = []byte(cp)
	}
	if err := e.Commit(b); err != nil {
		t.Fatalf("Commit(%q): %v", cp, err)
	}
}

// oracle is the plain model of semantics 1, 2 and 5: a map from key to the
// time it was last observed New, and whether that sighting is committed.
type oracle struct {
	window, span time.Duration
	seen         map[string]*oracleEntry
	inflight     []string
}

type oracleEntry struct {
	at        time.Time // when it was observed New
	hw        time.Time // the highest clock reading at that moment
	committed bool
}

// expect returns the verdict the model requires, or 0 if either New or
// Duplicate is allowed (the grace span between W and W + W/N).
//
// The engine may expire a key as soon as any clock reading has passed its
// expiry, so Duplicate is required only while the highest reading so far
// (hw) is within W of the sighting; New is required once the clock is past
// W + W/N of the highest reading at the sighting (after a backwards step a
// key goes into the newest generation).
func (o *oracle) expect(key string, now, hw time.Time) Verdict {
	en := o.seen[key]
	if en == nil {
		return New
	}
	if !en.committed {
		return InFlight
	}
	switch {
	case hw.Sub(en.at) < o.window:
		return Duplicate
	case now.Sub(en.hw) >= o.window+o.span:
		return New
	}
	return 0
}

func (o *oracle) record(key string, v Verdict, now, hw time.Time) {
	if v == New {
		o.seen[key] = &oracleEntry{at: now, hw: hw}
		o.inflight = append(o.inflight, key)
	}
}

func (o *oracle) commit() {
	for _, k := range o.inflight {
		if en := o.seen[k]; en != nil {
			en.committed = true
		}
	}
	o.inflight = o.inflight[:0]
}

// keyStream describes a deterministic stream of keys as clients send
// them, with repeats: near percent of the keys repeat one among the span
// keys before, far percent repeat any earlier key, and the rest are new,
// named by format from a counter.
type keyStream struct {
	seed1, seed2 uint64
	near, span   int // percent, keys back
	far          int // percent
	format       string
}

// keys returns the stream's first n keys; the same keyStream and n give the
// same keys.
func (c keyStream) keys(n int) []string {
	r := rand.New(rand.NewPCG(c.seed1, c.seed2))
	ev := make([]string, n)
	distinct := 0
	for i := range ev {
		switch x := r.IntN(100); {
		case i > 0 && x < c.near:
			ev[i] = ev[i-1-r.IntN(min(i, c.span))]
		case i > 0 && x < c.near+c.far:
			ev[i] = ev[r.IntN(i)]
		default:
			ev[i] = fmt.Sprintf(c.format, distinct)
			distinct++
		}
	}
	return ev
}

// startChild starts this test binary again, running only the test named
// run, with env added to its environment and its stderr this process's;
// it returns the child's stdout.
func startChild(t testing.TB, run string, env ...string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdout
}

// openOutput opens dir/out as a restarted child's output: cut back to
// length, the output's length at the last commit (what lies past it was
// written for keys whose commit never happened), and positioned there.
// SIGKILL keeps what write(2) wrote; surviving a power loss would take a
// Sync before each commit.
func openOutput(dir string, length int64) (*os.File, error) {
	out, err := os.OpenFile(filepath.Join(dir, "out"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := out.Truncate(length); err != nil {
		out.Close()
		return nil, err
	}
	if _, err := out.Seek(length, io.SeekStart); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// lineOutput is an output of keys, one a line through a buffer, whose
// checkpoint records the input's resume point and the output's length.
type lineOutput struct {
	w       *bufio.Writer
	written int64 // the output's length, buffered bytes included
}

// newLineOutput writes to out, whose length is length.
func newLineOutput(out io.Writer, length int64) *lineOutput {
	return &lineOutput{w: bufio.NewWriter(out), written: length}
}

// output writes k and a newline: a [PoolOptions.Output].
func (o *lineOutput) output(k string) error {
	n, err := o.w.WriteString(k + "\n")
	o.written += int64(n)
	return err
}

// checkpoint flushes the buffer and returns "<resume> <length>": a
// [PoolOptions.Checkpoint].
func (o *lineOutput) checkpoint(resume int64) ([]byte, error) {
	return fmt.Appendf(nil, "%d %d", resume, o.written), o.w.Flush()
}

// logLines collects what an engine logs through [Options.Logf]; it is safe
// for concurrent use.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

// logf is an [Options.Logf].
func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// all returns the lines logged so far.
func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// containing returns the lines logged so far that contain s.
func (l *logLines) containing(s string) []string {
	var found []string
	for _, line := range l.all() {
		if strings.Contains(line, s) {
			found = append(found, line)
		}
	}
	return found
}

// onGoroutines runs f(0), ..., f(n-1) on n goroutines and returns the
// first error any of them returned, once all have returned.
func onGoroutines(n int, f func(g int) error) error {
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { errs <- f(g) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
