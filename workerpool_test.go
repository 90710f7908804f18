package dedup_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// The child process of TestWorkerPoolCrash and TestPoolCrash is this test
// binary, re-executed with wpChildEnv set to the mode ("done": the recipe
// of the package doc by hand, Options.ExplicitDone and Done; "plain": the
// sequential API, Commit only, which loses events in a pool; "pool": the
// recipe run by dedup.Pool). TestWorkerPoolChild then runs the pool instead of
// returning at once.
const wpChildEnv = "DEDUP_WORKERPOOL_CHILD"

// The workload: wpEventCount events of which about 30% repeat an earlier
// key (two thirds of those within the 16 events before, so that two workers
// hold copies of one key at once), processed by wpWorkers workers; 1% of
// the processing attempts fail (the worker Forgets the key and retries the
// event); a commit every wpCommitEvery completed events or wpCommitTick,
// whichever comes first.
const (
	wpEventCount  = 120_000
	wpWorkers     = 8
	wpCommitEvery = 5000
	wpCommitTick  = 5 * time.Millisecond
	wpFailPercent = 1
)

// wpEvents is the input stream: the key of each event, by offset. The same
// for every process.
func wpEvents() []string {
	return keyStream{seed1: 42, seed2: 7, near: 20, span: 16, far: 10, format: "ev-%07d"}.keys(wpEventCount)
}

// wpOptions are the engine's options in mode explicitDone.
func wpOptions(dir string, explicitDone bool) dedup.Options {
	return dedup.Options{Dir: filepath.Join(dir, "state"), Window: time.Hour, ExpectedRate: 20000,
		ExplicitDone: explicitDone}
}

// wpDone tells the engine that key is processed (ExplicitDone only).
func wpDone(e *dedup.Engine, key []byte, explicitDone bool) error {
	if !explicitDone {
		return nil
	}
	return e.Done(key)
}

// wpPool is one process's run of the pool over the events from a
// checkpoint on.
type wpPool struct {
	e            *dedup.Engine
	explicitDone bool
	events       []string
	out          *os.File

	// mu orders the output, the completions and the barrier a commit
	// takes: an event's output is written, its key Done and the event
	// marked complete in one step, so a commit whose checkpoint records
	// output length L and watermark W covers exactly the keys whose output
	// lies below L, and every event below W is in the output or was a
	// Duplicate of a committed key.
	mu       sync.Mutex
	w        *bufio.Writer
	written  int64 // output length, flushed or not
	complete []bool
	low      int // the watermark: every event below it is complete
	since    int // completions since the last commit

	kick  chan struct{} // wpCommitEvery completions since the last commit
	retry chan int      // events to try again (their key was in flight)
	jobs  chan int
	stop  chan struct{}
}

// TestWorkerPoolChild is the child of TestWorkerPoolCrash: it resumes the
// pool from the engine's checkpoint, printing "S <watermark> <output
// length>" once open, "C <watermark> <output length>" after each commit
// returns and "END" once every event is committed, until it is killed.
func TestWorkerPoolChild(t *testing.T) {
	mode := os.Getenv(wpChildEnv)
	if mode == "" {
		return
	}
	run := func(dir string) error { return wpRun(dir, mode == "done") }
	if mode == "pool" {
		run = wpRunPool
	}
	if err := run(os.Getenv("DEDUP_WP_DIR")); err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	fmt.Println("END") // os.Stdout is unbuffered
}

// wpResume opens the engine on dir and the output, cut back to the length
// the checkpoint records, and prints "S <low> <length>": low is the index
// of the first event not yet committed.
func wpResume(dir string, explicitDone bool) (e *dedup.Engine, out *os.File, low int, length int64, err error) {
	e, err = dedup.Open(wpOptions(dir, explicitDone))
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("open: %w", err)
	}
	if cp := e.Checkpoint(); cp != nil {
		if _, err := fmt.Sscanf(string(cp), "%d %d", &low, &length); err != nil {
			e.Close()
			return nil, nil, 0, 0, fmt.Errorf("checkpoint %q: %w", cp, err)
		}
	}
	if out, err = openOutput(dir, length); err != nil {
		e.Close()
		return nil, nil, 0, 0, err
	}
	fmt.Printf("S %d %d\n", low, length)
	return e, out, low, length, nil
}

func wpRun(dir string, explicitDone bool) error {
	e, out, low, length, err := wpResume(dir, explicitDone)
	if err != nil {
		return err
	}
	events := wpEvents()
	p := &wpPool{
		e: e, explicitDone: explicitDone, events: events, out: out,
		w: bufio.NewWriter(out), written: length, complete: make([]bool, len(events)), low: low,
		kick: make(chan struct{}, 1), retry: make(chan int, len(events)), jobs: make(chan int, 64),
		stop: make(chan struct{}),
	}
	errs := make(chan error, wpWorkers+2)
	var wg sync.WaitGroup
	for w := 0; w < wpWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.work(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))); err != nil {
				errs <- err
			}
		}()
	}
	go func() {
		for i := low; i < len(events); i++ {
			select {
			case p.jobs <- i:
			case <-p.stop:
				return
			}
		}
	}()
	go func() { errs <- p.commitLoop() }()
	err = <-errs
	close(p.stop)
	wg.Wait()
	if err != nil {
		return err
	}
	return e.Close()
}

// wpRunPool is wpRun on dedup.Pool: the same events, failures and output,
// 20us of work per New event, a commit every wpCommitEvery completions and
// no timer, so that a pool that waited on Done keys until a commit would
// stall.
func wpRunPool(dir string) error {
	e, out, low, length, err := wpResume(dir, true)
	if err != nil {
		return err
	}
	o := newLineOutput(out, length)
	var rmu sync.Mutex
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	pool, err := dedup.NewPool(e, dedup.PoolOptions[string]{
		Workers: wpWorkers,
		Key:     func(k string) []byte { return []byte(k) },
		Process: func(ctx context.Context, k string) error {
			// Work that takes a while, so that the kills land mid-run.
			time.Sleep(20 * time.Microsecond)
			rmu.Lock()
			fail := r.IntN(100) < wpFailPercent
			rmu.Unlock()
			if fail {
				return errors.New("processing failed")
			}
			return nil
		},
		Output:         o.output,
		Checkpoint:     o.checkpoint,
		Committed:      func(cp []byte) { fmt.Printf("C %s\n", cp) },
		CommitEvery:    wpCommitEvery,
		CommitInterval: time.Hour,
		Attempts:       20,
	})
	if err != nil {
		return err
	}
	events := wpEvents()
	ctx := context.Background()
	for i := low; i < len(events); i++ {
		if err := pool.Submit(ctx, events[i], int64(i+1)); err != nil {
			return err
		}
	}
	if err := pool.Close(ctx); err != nil {
		return err
	}
	if cp := string(e.Checkpoint()); !strings.HasPrefix(cp, strconv.Itoa(len(events))+" ") {
		return fmt.Errorf("checkpoint %q after Close, want every event", cp)
	}
	return e.Close()
}

// TestPoolCrash is TestWorkerPoolCrash on dedup.Pool, 20 kills: the output
// must hold every distinct key exactly once.
func TestPoolCrash(t *testing.T) {
	if os.Getenv(wpChildEnv) != "" {
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	killRounds(t, killConfig{child: "TestWorkerPoolChild", kills: 20,
		env: []string{wpChildEnv + "=pool", "DEDUP_WP_DIR=" + dir}})
	wpCheckOutput(t, filepath.Join(dir, "out"), wpEvents())
}

// work processes events until stop.
func (p *wpPool) work(r *rand.Rand) error {
	for {
		var i int
		select {
		case <-p.stop:
			return nil
		case i = <-p.retry:
		case i = <-p.jobs:
		}
		if err := p.process(r, i); err != nil {
			return err
		}
	}
}

// process handles event i: a Duplicate is complete at once; a New key is
// processed (or, 1% of the time, fails: Forget and try again); InFlight
// means another worker owns a copy of the key and may still Forget it, so
// the event is tried again later, never dropped.
func (p *wpPool) process(r *rand.Rand, i int) error {
	key := []byte(p.events[i])
	for {
		v, err := p.e.Observe(key)
		if err != nil {
			return fmt.Errorf("observe %s: %w", key, err)
		}
		switch v {
		case dedup.Duplicate:
			p.mu.Lock()
			p.completeLocked(i)
			p.mu.Unlock()
			return nil
		case dedup.InFlight:
			time.AfterFunc(time.Millisecond, func() { p.retry <- i })
			return nil
		}
		// New: this worker owns the key until it is Done or forgotten.
		if r.IntN(8) == 0 {
			runtime.Gosched() // let commits and other workers run meanwhile
		}
		if r.IntN(100) < wpFailPercent {
			if err := p.e.Forget(key); err != nil {
				if p.explicitDone {
					return fmt.Errorf("forget %s: %w", key, err)
				}
				// Without Done a concurrent Commit may have made the key
				// durable already: the event is lost.
				fmt.Printf("FORGET %s: %v\n", key, err)
			}
			continue
		}
		p.mu.Lock()
		p.w.WriteString(p.events[i] + "\n")
		p.written += int64(len(key) + 1)
		err = wpDone(p.e, key, p.explicitDone)
		p.completeLocked(i)
		p.mu.Unlock()
		if err != nil {
			return fmt.Errorf("done %s: %w", key, err)
		}
		return nil
	}
}

// completeLocked marks event i complete and advances the watermark.
func (p *wpPool) completeLocked(i int) {
	p.complete[i] = true
	for p.low < len(p.complete) && p.complete[p.low] {
		p.low++
	}
	p.since++
	if p.since >= wpCommitEvery {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// commitLoop commits every wpCommitEvery completions or wpCommitTick, with
// the watermark and the output length as the checkpoint, concurrently with
// the workers, until every event is committed.
func (p *wpPool) commitLoop() error {
	tick := time.NewTicker(wpCommitTick)
	defer tick.Stop()
	for {
		select {
		case <-p.kick:
		case <-tick.C:
		}
		p.mu.Lock()
		if p.since == 0 && p.low < len(p.events) {
			p.mu.Unlock() // nothing completed since the last commit
			continue
		}
		if err := p.w.Flush(); err != nil {
			p.mu.Unlock()
			return err
		}
		low, length := p.low, p.written
		p.since = 0
		var b dedup.Barrier
		if p.explicitDone {
			// Exactly the keys Done so far: their output lies below length.
			b = p.e.Barrier()
		}
		p.mu.Unlock()
		if err := p.out.Sync(); err != nil {
			return err
		}
		cp := fmt.Appendf(nil, "%d %d", low, length)
		var err error
		if p.explicitDone {
			err = p.e.CommitThrough(b, cp)
		} else {
			err = p.e.Commit(cp)
		}
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		fmt.Printf("C %d %d\n", low, length)
		if low == len(p.events) {
			return nil
		}
	}
}

// TestWorkerPoolCrash runs a worker pool in a child process on a real
// directory and SIGKILLs it at random moments, round after round; a last
// round runs to the end. The pool uses the recipe of the package doc:
// Options.ExplicitDone, Done after the output is written, InFlight retried,
// a low-watermark checkpoint that records the output's length. The output
// must hold every distinct key of the input exactly once. With
// DEDUP_WP_PLAIN=1 it runs the same pool on the sequential API (Commit
// without Done), which loses events.
func TestWorkerPoolCrash(t *testing.T) {
	if os.Getenv(wpChildEnv) != "" {
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	mode := "done"
	if os.Getenv("DEDUP_WP_PLAIN") == "1" {
		mode = "plain"
	}
	dir := t.TempDir()
	forgetFailures := 0
	killRounds(t, killConfig{
		child: "TestWorkerPoolChild", kills: 24,
		env: []string{wpChildEnv + "=" + mode, "DEDUP_WP_DIR=" + dir},
		line: func(round int, f []string) {
			if f[0] == "FORGET" {
				forgetFailures++
				if forgetFailures <= 3 {
					t.Logf("round %d: child: %s", round, strings.Join(f, " "))
				}
			}
		},
	})
	if forgetFailures > 0 {
		t.Logf("%d Forget calls failed: their keys had been committed before they were processed", forgetFailures)
	}
	wpCheckOutput(t, filepath.Join(dir, "out"), wpEvents())
}

// killConfig describes the rounds of killRounds.
type killConfig struct {
	child string   // the test function the child runs
	env   []string // added to the child's environment
	kills int      // rounds killed; one more runs to the end
	// line, if not nil, sees each line of the child's output, split into
	// fields, besides what killRounds reads.
	line func(round int, fields []string)
}

// killRounds runs the child test c.child (this test binary re-executed)
// c.kills times, SIGKILLing it at a random moment each time, then once to
// the end. The child prints "S <watermark> ..." once its state is open, "C
// <watermark> ..." after each commit returns, "END" once it has finished,
// and "ERR ..." on failure (fatal). A quarter of the rounds are killed
// within 30ms of the start (maybe while the child opens the state), the
// others after 0-2 commits and then 0-20ms. A round that resumes below the
// watermark of a commit that returned before fails the test.
func killRounds(t *testing.T, c killConfig) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 3))
	t.Logf("seed %d, child %s", seed, c.child)
	lastLow, ended := 0, false
	for round := 0; round <= c.kills; round++ {
		final := round == c.kills
		cmd, stdout := startChild(t, c.child, c.env...)
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		early := r.IntN(4) == 0
		waitCommits := r.IntN(3)
		var killAt <-chan time.Time
		if early && !final {
			killAt = time.After(time.Duration(r.IntN(30)) * time.Millisecond)
		}
		timeout := time.After(2 * time.Minute)
		started, commits, killed := false, 0, false
		var startLow int
		var last []string
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				last = append(last, line)
				f := strings.Fields(line)
				if len(f) == 0 {
					continue
				}
				if c.line != nil {
					c.line(round, f)
				}
				switch {
				case f[0] == "ERR":
					t.Fatalf("round %d: child: %s", round, line)
				case f[0] == "S":
					started = true
					startLow, _ = strconv.Atoi(f[1])
					if startLow < lastLow {
						t.Fatalf("round %d: resumed at %d, but a commit through %d had returned", round, startLow, lastLow)
					}
					lastLow = startLow
				case f[0] == "C":
					commits++
					low, _ := strconv.Atoi(f[1])
					lastLow = max(lastLow, low)
					if !final && !early && !killed && commits > waitCommits {
						killAt = time.After(time.Duration(r.IntN(20)) * time.Millisecond)
						waitCommits = 1 << 30
					}
				case f[0] == "END":
					ended = true
				}
			case <-killAt:
				_ = cmd.Process.Kill() // SIGKILL
				killed, killAt = true, nil
			case <-timeout:
				_ = cmd.Process.Kill()
				t.Fatalf("round %d: child still running after 2 minutes; last lines: %q", round, last[max(0, len(last)-5):])
			}
		}
		werr := cmd.Wait()
		if final && (werr != nil || !ended) {
			t.Fatalf("round %d: child ended with %v before END; last lines: %q", round, werr, last[max(0, len(last)-5):])
		}
		if !killed && !ended {
			t.Fatalf("round %d: child ended with %v, unkilled, before END", round, werr)
		}
		t.Logf("round %d: started=%v at %d, %d commits, killed=%v, ended=%v", round, started, startLow, commits, killed, ended)
	}
}

// wpCheckOutput checks that the output holds every distinct key of
// input exactly once.
func wpCheckOutput(t *testing.T, path string, input []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("output ends in a partial line")
	}
	count := map[string]int{}
	for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(l) > 0 {
			count[string(l)]++
		}
	}
	var missing, twice, unknown []string
	want := map[string]bool{}
	for _, k := range input {
		want[k] = true
	}
	for k := range want {
		switch count[k] {
		case 0:
			missing = append(missing, k)
		case 1:
		default:
			twice = append(twice, fmt.Sprintf("%s×%d", k, count[k]))
		}
	}
	for k := range count {
		if !want[k] {
			unknown = append(unknown, k)
		}
	}
	if len(missing)+len(twice)+len(unknown) > 0 {
		t.Fatalf("output is not every distinct key exactly once: %d distinct keys; %d never output (e.g. %q), %d output more than once (e.g. %q), %d not in the input (e.g. %q)",
			len(want), len(missing), missing[:min(5, len(missing))], len(twice), twice[:min(5, len(twice))],
			len(unknown), unknown[:min(5, len(unknown))])
	}
	t.Logf("output: %d distinct keys, each exactly once", len(want))
}
