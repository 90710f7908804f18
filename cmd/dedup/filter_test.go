package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamdedup/dedup"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestResume pins the file-to-file protocol in-process: output past the
// committed length is truncated, the input resumes at the committed
// offset, a completed job is a no-op, a shorter output is an error and a
// different job starts over with the remembered keys.
func TestResume(t *testing.T) {
	dir := t.TempDir()
	in, out, state := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "state")
	args := []string{"filter", "--format", "lines", "--state", state, "--in", in, "--out", out}
	writeFile(t, in, "a\nb\na\n")
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := readFile(t, out); got != "a\nb\n" {
		t.Fatalf("out %q", got)
	}
	// A crash after writing, before committing, leaves output past the
	// committed length; the input grew meanwhile.
	appendFile(t, out, "uncommitted\n")
	appendFile(t, in, "c\nb\nd\n")
	code, _, stderr := runCmd(t, "", append(args, "--stats")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := readFile(t, out); got != "a\nb\nc\nd\n" {
		t.Fatalf("after resume: out %q", got)
	}
	if !strings.Contains(stderr, "events          3\n") || !strings.Contains(stderr, "resumed") {
		t.Errorf("resumed run should read 3 events:\n%s", stderr)
	}
	// Completed: again is a no-op.
	if code, _, stderr := runCmd(t, "", args...); code != 0 || readFile(t, out) != "a\nb\nc\nd\n" {
		t.Fatalf("rerun: exit %d %s, out %q", code, stderr, readFile(t, out))
	}
	// --from-start reads everything again: every key is remembered, and
	// the output keeps what it holds.
	if code, _, stderr := runCmd(t, "", append(args, "--from-start")...); code != 0 || readFile(t, out) != "a\nb\nc\nd\n" {
		t.Fatalf("--from-start: exit %d %s, out %q", code, stderr, readFile(t, out))
	}
	// A shorter output than committed is an error, not a silent loss.
	writeFile(t, in, "e\nf\n")
	if code, _, _ := runCmd(t, "", append(args, "--from-start")...); code != 0 {
		t.Fatal("setup run failed")
	}
	writeFile(t, out, "")
	appendFile(t, in, "g\n")
	if code, _, stderr := runCmd(t, "", args...); code != exitRuntime || !strings.Contains(stderr, "committed") {
		t.Fatalf("shorter output: exit %d: %s", code, stderr)
	}
	// Another job (another output) starts from the beginning.
	out2 := filepath.Join(dir, "out2")
	if code, _, stderr := runCmd(t, "", "filter", "--format", "lines", "--state", state, "--in", in, "--out", out2); code != 0 {
		t.Fatalf("new job: exit %d: %s", code, stderr)
	}
	if got := readFile(t, out2); got != "g\n" {
		t.Fatalf("new job: out %q", got)
	}
}

func TestStdinToStdout(t *testing.T) {
	code, stdout, stderr := runCmd(t, "{\"id\":1}\n{\"id\":2}\n{\"id\":1}\nbad\n", "filter", "--key", "id")
	if code != 0 || stdout != "{\"id\":1}\n{\"id\":2}\n" || !strings.HasPrefix(stderr, "<stdin>:4: not JSON") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestLongLineRejected(t *testing.T) {
	long := strings.Repeat("x", 10000)
	code, stdout, stderr := runCmd(t, "a\n"+long+"\nb\n", "filter", "--format", "lines", "--max-line", "5000", "--chunk", "4096")
	if code != 0 || stdout != "a\nb\n" || !strings.Contains(stderr, "<stdin>:2: line too long") {
		t.Fatalf("exit %d, stdout %q, stderr %.200q", code, stdout, stderr)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout+stderr
	}{
		{[]string{"help"}, 0, "Examples"},
		{[]string{"--help"}, 0, "Commands"},
		{[]string{"help", "filter"}, 0, "Exit status"},
		{[]string{"filter", "-h"}, 0, "-commit-every"},
		{[]string{"stats", "-h"}, 0, "Usage: dedup stats"},
		{[]string{}, 2, "Usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"filter", "--nope"}, 2, "not defined"},
		{[]string{"filter", "--key", "id", "--fp", "2"}, 2, "--fp: must be in (0, 1)"},
		{[]string{"filter", "--key", "id", "--out", "x", "--dups", "x"}, 2, "same file"},
		{[]string{"filter", "--key", "id", "--commit-every", "0"}, 2, "commit-every"},
		{[]string{"filter", "--key", "id", "/does/not/exist"}, 1, "no such file"},
		{[]string{"stats"}, 2, "one state directory"},
		{[]string{"stats", "/does/not/exist"}, 1, "no such file"},
		{[]string{"help", "snapshot"}, 0, "inspect PATH"},
		{[]string{"help", "snapshot", "verify"}, 0, "Exit status"},
		{[]string{"help", "backup"}, 0, "Usage: dedup backup"},
		{[]string{"help", "restore"}, 0, "refuses a DIR"},
		{[]string{"snapshot", "-h"}, 0, "rebuild DIR"},
		{[]string{"snapshot", "inspect", "-h"}, 0, "-quick"},
		{[]string{"snapshot", "rebuild", "-h"}, 0, "Usage: dedup snapshot rebuild"},
		{[]string{"backup", "-h"}, 0, "Usage: dedup backup"},
		{[]string{"restore", "--help"}, 0, "Usage: dedup restore"},
		{[]string{"snapshot"}, 2, "want a subcommand"},
		{[]string{"snapshot", "frob"}, 2, "unknown subcommand"},
		{[]string{"snapshot", "inspect"}, 2, "want one PATH"},
		{[]string{"snapshot", "verify", "/does/not/exist"}, 1, "no such file"},
		{[]string{"snapshot", "rebuild", "/does/not/exist"}, 1, "not a state directory"},
		{[]string{"backup", "x"}, 2, `want a state directory and a destination, got 1 argument ("x")`},
		{[]string{"stats", "a", "b"}, 2, "got 2 arguments"},
		{[]string{"backup", "/does/not/exist", "/tmp/nope"}, 1, "not a state directory"},
		{[]string{"restore", "/does/not/exist", "/tmp/nope"}, 1, "no such file"},
		{[]string{"filter", "--key", "id", "--snapshot-interval", "-1s"}, 2, "snapshot-interval"},
	} {
		code, stdout, stderr := runCmd(t, "", tc.args...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.out) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s%s", tc.args, code, tc.code, tc.out, stdout, stderr)
		}
	}
}

func TestStatsCommand(t *testing.T) {
	dir := t.TempDir()
	in, state := filepath.Join(dir, "in"), filepath.Join(dir, "state")
	writeFile(t, in, "a\nb\na\n")
	if code, _, stderr := runCmd(t, "", "filter", "--format", "lines", "--window", "10m", "--state", state, "--in", in, "--out", filepath.Join(dir, "out")); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCmd(t, "", "stats", "--window", "10m", state)
	if code != 0 || !strings.Contains(stdout, "position         input 0") || !strings.Contains(stdout, "3 events: 2 distinct, 1 duplicates") {
		t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCmd(t, "", "stats", "--json", "--window", "10m", state)
	var rep statsReport
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil || rep.Checkpoint == nil || rep.Engine.FilterKeys != 2 {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	// The options come from the state: no flag needed; a contradicting
	// one is bad usage naming it.
	if code, stdout, stderr := runCmd(t, "", "stats", state); code != 0 || !strings.Contains(stdout, "window 10m0s") {
		t.Fatalf("stats without flags: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, "", "stats", "--window", "1h", state); code != exitBad || !strings.Contains(stderr, "--window=1h0m0s contradicts") {
		t.Fatalf("wrong window: exit %d: %s", code, stderr)
	}
}

// TestCollector: the metrics --metrics serves, gathered: every duplicate
// counted under one name (of a committed key or of one in flight, these
// counted apart too), the
// histograms of commits and snapshots, and the Go and process collectors.
func TestCollector(t *testing.T) {
	eng, err := dedup.Open(dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for _, k := range []string{"k", "k", "c"} { // New, InFlight, New
		if _, err := eng.Observe([]byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Observe([]byte("c")); err != nil { // Duplicate
		t.Fatal(err)
	}
	f := &filterRun{eng: eng}
	reg, err := f.registry()
	if err != nil {
		t.Fatal(err)
	}
	f.commitHist.Observe(0.003)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"dedup_engine_new_total":                  2,
		"dedup_engine_duplicates_total":           2,
		"dedup_engine_duplicates_in_flight_total": 1,
		"dedup_engine_inflight_keys":              0,
		"dedup_filter_commit_duration_seconds":    1,
		"dedup_engine_snapshot_duration_seconds":  0,
		"dedup_filter_events_total":               0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
}

// TestMistypedKeyFloodsStderr: a mistyped --key without --rejects wrote
// one stderr line per input line before its one-line verdict. Stderr now
// shows the first rejects and one line counting the rest; --rejects FILE
// still keeps every one.
func TestMistypedKeyFloodsStderr(t *testing.T) {
	const n = 5000
	const stderrRejects = 10 // the rejects dedup filter shows on stderr without --rejects
	dir := t.TempDir()
	in := filepath.Join(dir, "in.ndjson")
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"id\":%d}\n", i)
	}
	writeFile(t, in, b.String())
	code, _, stderr := runCmd(t, "", "filter", "--key", "idd", "--out", filepath.Join(dir, "out"), in)
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if code != exitBad || len(lines) != stderrRejects+2 {
		t.Fatalf("exit %d, %d stderr lines, want %d and %d:\n%s", code, len(lines), exitBad, stderrRejects+2, stderr)
	}
	for i, l := range lines[:stderrRejects] {
		if want := fmt.Sprintf("%s:%d: missing key \"idd\"\t{\"id\":%d}", in, i+1, i); l != want {
			t.Errorf("stderr line %d = %q, want %q", i+1, l, want)
		}
	}
	if want := fmt.Sprintf("... %d more rejected lines not shown; use --rejects FILE to keep them", n-stderrRejects); lines[stderrRejects] != want {
		t.Errorf("stderr line %d = %q, want %q", stderrRejects+1, lines[stderrRejects], want)
	}
	if !strings.Contains(lines[stderrRejects+1], "every line was rejected (5000)") {
		t.Errorf("last stderr line = %q, want the verdict", lines[stderrRejects+1])
	}
	// With --rejects every one is kept, and stderr holds the verdict only.
	rej := filepath.Join(dir, "rejects")
	code, _, stderr = runCmd(t, "", "filter", "--key", "idd", "--out", filepath.Join(dir, "out2"), "--rejects", rej, in)
	if got := strings.Count(readFile(t, rej), "\n"); code != exitBad || got != n || strings.Count(stderr, "\n") != 1 {
		t.Errorf("--rejects: exit %d, %d lines in the file, want %d; stderr:\n%s", code, got, n, stderr)
	}
}

// TestOutputIsAnInput: an output that is an input by the file's identity
// (a hard link, a symbolic link, stdin redirected from it, stdout appended
// to it) is refused with exit 2 before anything is opened for writing, and
// the input keeps its bytes.
func TestOutputIsAnInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "h.ndjson")
	const body = "{\"id\":1}\n{\"id\":1}\n{\"id\":2}\n"
	if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	hard, sym := filepath.Join(dir, "h2.ndjson"), filepath.Join(dir, "h3.ndjson")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(in, sym); err != nil {
		t.Fatal(err)
	}
	open := func(flag int) *os.File {
		f, err := os.OpenFile(in, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	for _, tc := range []struct {
		name   string
		stdin  io.Reader
		stdout io.Writer
		args   []string
	}{
		{"hard link", nil, nil, []string{"--in", in, "--out", hard}},
		{"symbolic link", nil, nil, []string{"--in", in, "--out", sym}},
		{"dups", nil, nil, []string{in, "--dups", hard}},
		{"rejects", nil, nil, []string{in, "--rejects", sym}},
		{"stdin", open(os.O_RDONLY), nil, []string{"--out", in}},
		{"stdout", nil, open(os.O_WRONLY | os.O_APPEND), []string{in}},
	} {
		var errb, out bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}
		if tc.stdin != nil {
			e.stdin = tc.stdin
		}
		if tc.stdout != nil {
			e.stdout = tc.stdout
		}
		code := run(e, append([]string{"filter", "--key", "id"}, tc.args...))
		if code != 2 || !strings.Contains(errb.String(), "is the same file as") {
			t.Errorf("%s: exit %d, stderr %q; want 2, the same file", tc.name, code, errb.String())
		}
		if b, err := os.ReadFile(in); err != nil || string(b) != body {
			t.Fatalf("%s: input now %q, %v", tc.name, b, err)
		}
	}
}
