package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// signalIdle runs dedup with args in a child process, feeds it one line
// on a stdin left open, waits for that line on stdout (the run is then
// blocked reading stdin), sends sig and returns the exit status and stderr.
func signalIdle(t *testing.T, sig syscall.Signal, args ...string) (int, string) {
	t.Helper()
	cmd := dedupProcess(t, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wait := make(chan error, 1)
	go func() { wait <- cmd.Wait() }()
	if _, err := io.WriteString(stdin, `{"id":"first"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != `{"id":"first"}`+"\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	// A hang detector, not a timing target.
	select {
	case err = <-wait:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-wait
		t.Fatalf("%v did not stop a run blocked on stdin: %s", sig, stderr.String())
	}
	var xe *exec.ExitError
	if !errors.As(err, &xe) {
		t.Fatalf("exit: %v: %s", err, stderr.String())
	}
	return xe.ExitCode(), stderr.String()
}

// TestInterruptedPromisesResume: interrupted, a run without --state, or
// reading stdin, said "state committed, run the same command again to
// resume": there is no state, or stdin cannot be resumed. The message
// says what is true of the run.
func TestInterruptedPromisesResume(t *testing.T) {
	dir := t.TempDir()
	code, stderr := signalIdle(t, syscall.SIGINT, "filter", "--key", "id", "--progress", "never")
	if code != exitRuntime || !strings.Contains(stderr, "interrupted") || strings.Contains(stderr, "state") || strings.Contains(stderr, "resume") {
		t.Fatalf("without --state: exit %d: %s", code, stderr)
	}
	code, stderr = signalIdle(t, syscall.SIGINT, "filter", "--key", "id", "--progress", "never", "--state", filepath.Join(dir, "state"))
	if code != exitRuntime || !strings.Contains(stderr, "committed") || strings.Contains(stderr, "run the same command again to resume") {
		t.Fatalf("stdin with --state: exit %d: %s", code, stderr)
	}
}

// TestMetricsBadAddressExit1: a malformed --metrics (or serve's --listen)
// address, bad usage, exited with status 1 like a port in use; so did a
// host that does not resolve, and dedup kafka did not check --metrics
// before joining its group.
func TestMetricsBadAddressExit1(t *testing.T) {
	for _, args := range [][]string{
		{"filter", "--key", "id", "--metrics", "bogus"},
		{"filter", "--key", "id", "--metrics", "127.0.0.1:99999"},
		{"filter", "--key", "id", "--metrics", "nonsense.invalid:9090"},
		{"kafka", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "t", "--out-topic", "o",
			"--state", t.TempDir(), "--metrics", "nonsense.invalid:9090"},
		{"serve", "--metrics", "localhost"},
		{"serve", "--listen", "127.0.0.1:-1"},
	} {
		code, _, stderr := runCmd(t, "", args...)
		flag := args[len(args)-2]
		if code != exitBad || !strings.Contains(stderr, flag) {
			t.Errorf("%q: exit %d, want %d naming %s: %s", args, code, exitBad, flag, stderr)
		}
	}
}

// TestProgressFinalLineStale: the progress bar's last line kept the
// events/s and duplicate share of its last tick (none at all for a run
// shorter than a tick), not those of the whole run.
func TestProgressFinalLineStale(t *testing.T) {
	in := ndjsonLines("k", 3) + ndjsonLines("k", 1) // 4 events, 1 duplicate
	code, _, stderr := runCmd(t, in, "filter", "--key", "id", "--progress", "always")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.FieldsFunc(stderr, func(r rune) bool { return r == '\r' || r == '\n' })
	last := ""
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			last = l
		}
	}
	if !strings.Contains(last, "25.0% dup") {
		t.Fatalf("last progress line %q, want 25.0%% dup", last)
	}
}

// TestInputsOutOfOrder: the inputs are the FILEs and --in FILEs in the
// order given, as the help says; --in FILEs were read before every
// positional FILE, so "a --in b" read b first (and a rotated log's file
// given first as a positional came second).
func TestInputsOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	writeFile(t, a, `{"id":"a"}`+"\n")
	writeFile(t, b, `{"id":"b"}`+"\n")
	writeFile(t, c, `{"id":"c"}`+"\n")
	code, stdout, stderr := runCmd(t, "", "filter", "--key", "id", a, "--in", b, c)
	if want := "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n"; code != 0 || stdout != want {
		t.Fatalf("exit %d, out %q, want %q: %s", code, stdout, want, stderr)
	}
}

// TestStrayLineFailsResumedRun: a resumed job (cron over a growing log)
// whose run read one line, garbage, failed with exit status 2 and "every
// line was rejected ... is the input NDJSON?", though the job's other
// lines were keyed fine. A resumed run is judged with its job's counts; a
// run of its own fails only when most of at least 1000 lines are rejected.
func TestStrayLineFailsResumedRun(t *testing.T) {
	dir := t.TempDir()
	log, out, rej, state := filepath.Join(dir, "app.log"), filepath.Join(dir, "out"), filepath.Join(dir, "rej"), filepath.Join(dir, "state")
	args := []string{"filter", "--key", "id", "--state", state, "--in", log, "--out", out, "--rejects", rej}
	writeFile(t, log, ndjsonLines("a", 100))
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	appendFile(t, log, "a line from a crashed writer\n")
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("one stray line: exit %d: %s", code, stderr)
	}
	// The data changed shape: most of 1000 new lines rejected fails.
	appendFile(t, log, strings.Repeat(`{"event":"x"}`+"\n", 1000))
	if code, _, stderr := runCmd(t, "", args...); code != exitBad || !strings.Contains(stderr, "1000 of them") {
		t.Fatalf("1000 new lines rejected: exit %d, want %d: %s", code, exitBad, stderr)
	}
}

// TestDirectoryInputLeavesOutput: a directory given as input failed only
// when read, after --out was created empty, with "read D: read D: is a
// directory". It fails before any output is created, naming it once.
func TestDirectoryInputLeavesOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--in", dir, "--out", out)
	if code != exitRuntime || strings.Count(stderr, dir) != 1 || !strings.Contains(stderr, "is a directory") {
		t.Fatalf("exit %d, want %d naming %s once: %s", code, exitRuntime, dir, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("--out was created: %v", err)
	}
}

// TestEngineLogDoublePrefix: the engine's log lines, which start with
// "dedup: " already, were shown as "dedup: engine: dedup: rebuilding
// filters from the exact store" after a kill -9.
func TestEngineLogDoublePrefix(t *testing.T) {
	var b bytes.Buffer
	engineLog(&env{stderr: &b})("dedup: rebuilding filters from the exact store")
	if got, want := b.String(), "dedup: engine: rebuilding filters from the exact store\n"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// TestRateHelpPlaceholder: the help showed "-rate SECOND  expected
// distinct keys per SECOND", as if the value were a duration.
func TestRateHelpPlaceholder(t *testing.T) {
	_, stdout, _ := runCmd(t, "", "help", "filter")
	if strings.Contains(stdout, "-rate SECOND") || !strings.Contains(stdout, "-rate N") || !strings.Contains(stdout, "-shards N") {
		t.Fatalf("help:\n%s", stdout)
	}
}

// TestOpenStateNamedTwice: a directory that is not a state failed with
// "dedup: open state: dedup: open state "DIR": ...".
func TestOpenStateNamedTwice(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "readme.txt"), "not a state\n")
	code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", dir)
	if code != exitRuntime || strings.Count(stderr, "open state") != 1 || strings.Count(stderr, "dedup:") != 1 {
		t.Fatalf("exit %d: %q", code, stderr)
	}
}
