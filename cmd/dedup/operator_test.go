package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of this file pin what an operator relies on: inputs that grow
// or rotate never lose an event, and exit statuses and flags say what
// happened.

// TestHelperDedup is not a test: run by dedupProcess as a child process,
// it is the dedup command, with the arguments in DEDUP_TEST_ARGS.
func TestHelperDedup(t *testing.T) {
	raw := os.Getenv("DEDUP_TEST_ARGS")
	if raw == "" {
		t.Skip("helper process only")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	e.sigs = notifySignals()
	os.Exit(run(e, args))
}

// dedupProcess returns the command that runs dedup with args in a child
// process (this test binary, as TestHelperDedup).
func dedupProcess(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDedup$")
	cmd.Env = append(os.Environ(), "DEDUP_TEST_ARGS="+string(raw))
	return cmd
}

// startPiped starts cmd with a pipe to its stdin and one from its stdout;
// when the test ends it closes stdin and waits for the child.
func startPiped(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, *bufio.Reader) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	return stdin, bufio.NewReader(stdout)
}

// ndjsonLines returns n lines {"id":"PREFIXi"}, i from 1.
func ndjsonLines(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "{\"id\":\"%s%d\"}\n", prefix, i)
	}
	return b.String()
}

// TestGrowingFileLastLine: the last line of a growing input, not yet
// terminated by a newline, is not consumed: the committed position stays
// before it, and the next run reads it whole once the writer finished it.
func TestGrowingFileLastLine(t *testing.T) {
	dir := t.TempDir()
	in, out, rej, state := filepath.Join(dir, "app.ndjson"), filepath.Join(dir, "out"), filepath.Join(dir, "rej"), filepath.Join(dir, "state")
	args := []string{"filter", "--key", "event_id", "--state", state, "--in", in, "--out", out, "--rejects", rej}
	writeFile(t, in, `{"event_id":"e1"}`+"\n"+`{"event_id":"e2","pay`)
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	if got := readFile(t, out); got != `{"event_id":"e1"}`+"\n" {
		t.Fatalf("first run: out %q", got)
	}
	if got := readFile(t, rej); got != "" {
		t.Fatalf("first run: the line being written was rejected: %q", got)
	}
	appendFile(t, in, `load":1}`+"\n"+`{"event_id":"e3"}`+"\n")
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	want := `{"event_id":"e1"}` + "\n" + `{"event_id":"e2","payload":1}` + "\n" + `{"event_id":"e3"}` + "\n"
	if got := readFile(t, out); got != want {
		t.Fatalf("second run: out %q, want %q", got, want)
	}
	if got := readFile(t, rej); got != "" {
		t.Fatalf("second run: rejects %q", got)
	}

	// On stdin, and without a state to resume, the end of the input ends
	// the last line: it is a line.
	if code, stdout, stderr := runCmd(t, `{"id":1}`+"\n"+`{"id":2}`, "filter", "--key", "id"); code != 0 || stdout != "{\"id\":1}\n{\"id\":2}\n" {
		t.Fatalf("stdin: exit %d, out %q: %s", code, stdout, stderr)
	}
	once := filepath.Join(dir, "once.ndjson")
	writeFile(t, once, `{"id":1}`+"\n"+`{"id":2}`)
	if code, stdout, stderr := runCmd(t, "", "filter", "--key", "id", once); code != 0 || stdout != "{\"id\":1}\n{\"id\":2}\n" {
		t.Fatalf("file without state: exit %d, out %q: %s", code, stdout, stderr)
	}
}

// TestRotatedInput: an input replaced since the last run (rotated: a new
// file under the same name, or rewritten in place) is not read from the
// committed offset of the old one: the run fails naming the file and
// --from-start, which then reads it from its start.
func TestRotatedInput(t *testing.T) {
	for _, how := range []string{"renamed-over", "rewritten-in-place", "same-size"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			in, out, state := filepath.Join(dir, "rot.log"), filepath.Join(dir, "out"), filepath.Join(dir, "state")
			args := []string{"filter", "--key", "id", "--state", state, "--in", in, "--out", out}
			writeFile(t, in, ndjsonLines("a", 1000))
			if code, _, stderr := runCmd(t, "", args...); code != 0 {
				t.Fatalf("first run: exit %d: %s", code, stderr)
			}
			first := readFile(t, out)
			switch how {
			case "renamed-over":
				writeFile(t, in+".new", ndjsonLines("b", 3000))
				if err := os.Rename(in+".new", in); err != nil {
					t.Fatal(err)
				}
			case "rewritten-in-place":
				writeFile(t, in, ndjsonLines("b", 3000))
			case "same-size":
				// Same length, same inode, other bytes before the offset;
				// then it grows.
				writeFile(t, in, ndjsonLines("c", 1000))
				appendFile(t, in, ndjsonLines("d", 10))
			}
			code, _, stderr := runCmd(t, "", args...)
			if code == 0 || !strings.Contains(stderr, in) || !strings.Contains(stderr, "--from-start") {
				t.Fatalf("rotated input: exit %d, want an error naming %s and --from-start: %s", code, in, stderr)
			}
			if got := readFile(t, out); got != first {
				t.Fatalf("rotated input: the output changed to %d bytes", len(got))
			}
			code, _, stderr = runCmd(t, "", append(args, "--from-start")...)
			if code != 0 {
				t.Fatalf("--from-start: exit %d: %s", code, stderr)
			}
			got := readFile(t, out)
			if !strings.HasPrefix(got, first) {
				t.Fatalf("--from-start lost the earlier output")
			}
			if n, want := strings.Count(got[len(first):], "\n"), strings.Count(readFile(t, in), "\n"); n != want {
				t.Fatalf("--from-start wrote %d lines of the new file, want %d", n, want)
			}
			// And the new file is resumed from then on.
			appendFile(t, in, `{"id":"z"}`+"\n")
			if code, _, stderr := runCmd(t, "", args...); code != 0 || !strings.HasSuffix(readFile(t, out), `{"id":"z"}`+"\n") {
				t.Fatalf("after --from-start: exit %d: %s", code, stderr)
			}
		})
	}
}

// TestOtherJobKeepsOutput: a run that is not the state's job (its inputs
// in another order, say) must not truncate an output holding events that
// the state remembers: they would never be written again. It is refused,
// unless asked: --from-start appends to it, --overwrite truncates it.
func TestOtherJobKeepsOutput(t *testing.T) {
	dir := t.TempDir()
	a, b, out, state := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "out"), filepath.Join(dir, "state")
	writeFile(t, a, `{"id":1}`+"\n")
	writeFile(t, b, `{"id":2}`+"\n")
	if code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, a, b, "--out", out); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	want := "{\"id\":1}\n{\"id\":2}\n"
	code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, b, a, "--out", out)
	if code != exitBad || !strings.Contains(stderr, out) {
		t.Fatalf("inputs in another order: exit %d, want %d naming %s: %s", code, exitBad, out, stderr)
	}
	if got := readFile(t, out); got != want {
		t.Fatalf("inputs in another order: out %q, want %q", got, want)
	}
	// Asked to read them from the start, the run appends what is new.
	writeFile(t, b, `{"id":2}`+"\n"+`{"id":3}`+"\n")
	if code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, b, a, "--out", out, "--from-start"); code != 0 {
		t.Fatalf("--from-start: exit %d: %s", code, stderr)
	}
	want += "{\"id\":3}\n"
	if got := readFile(t, out); got != want {
		t.Fatalf("--from-start: out %q, want %q", got, want)
	}
	// Another existing output, not the state's: refused, or truncated
	// with --overwrite.
	other := filepath.Join(dir, "other")
	writeFile(t, other, "precious\n")
	if code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, a, "--out", other); code != exitBad || !strings.Contains(stderr, "--overwrite") {
		t.Fatalf("existing output: exit %d: %s", code, stderr)
	}
	if got := readFile(t, other); got != "precious\n" {
		t.Fatalf("existing output changed: %q", got)
	}
	if code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, a, "--out", other, "--overwrite"); code != 0 || readFile(t, other) != "" {
		t.Fatalf("--overwrite: exit %d, out %q: %s", code, readFile(t, other), stderr)
	}
}

// TestMostlyRejected: a run whose lines are all rejected, or more than
// half of at least 1000, fails with one line naming the key and a hint:
// a wrong --key must not look like success.
func TestMostlyRejected(t *testing.T) {
	dir := t.TempDir()
	in, rej := filepath.Join(dir, "u.ndjson"), filepath.Join(dir, "rej")
	var b strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&b, "{\"user\":{\"id\":7,\"seq\":%d}}\n", i)
	}
	writeFile(t, in, b.String())
	code, stdout, stderr := runCmd(t, "", "filter", "--key", "user.id,seq", in, "--rejects", rej)
	if code != exitBad || stdout != "" {
		t.Fatalf("wrong key: exit %d, want %d (out %d bytes): %s", code, exitBad, len(stdout), stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.Contains(stderr, `"seq"`) || !strings.Contains(stderr, "user.seq") {
		t.Fatalf("wrong key: want one line naming \"seq\" with a hint at user.seq:\n%s", stderr)
	}
	// The right key passes.
	if code, _, stderr := runCmd(t, "", "filter", "--key", "user.id,user.seq", in, "--rejects", rej); code != 0 {
		t.Fatalf("right key: exit %d: %s", code, stderr)
	}
	// Every line rejected, however few.
	if code, _, stderr := runCmd(t, "not json\n", "filter", "--key", "id"); code != exitBad || !strings.Contains(stderr, "every line") {
		t.Fatalf("one bad line: exit %d: %s", code, stderr)
	}
	// A few rejects are no failure: 400 of 1000.
	b.Reset()
	for i := range 1000 {
		if i%5 < 2 {
			b.WriteString("garbage\n")
		} else {
			fmt.Fprintf(&b, "{\"id\":%d}\n", i)
		}
	}
	if code, _, stderr := runCmd(t, b.String(), "filter", "--key", "id", "--rejects", rej); code != 0 {
		t.Fatalf("40%% rejects: exit %d: %s", code, stderr)
	}
	// Half of fewer than 1000 lines is no failure either.
	if code, _, stderr := runCmd(t, "garbage\n{\"id\":1}\n", "filter", "--key", "id", "--rejects", rej); code != 0 {
		t.Fatalf("1 of 2: exit %d: %s", code, stderr)
	}
}

// TestExplicitBadValues: a flag given a zero or out-of-range value is bad
// usage naming it, never silently replaced by the default.
func TestExplicitBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--fp", "0"}, "--fp"},
		{[]string{"--fp", "1"}, "--fp"},
		{[]string{"--shards", "0"}, "--shards"},
		{[]string{"--shards", "-3"}, "--shards"},
		{[]string{"--generations", "0"}, "--generations"},
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--rate", "-5"}, "--rate"},
		{[]string{"--window", "0"}, "--window"},
		{[]string{"--max-key", "0"}, "--max-key"},
		{[]string{"--horizon-bytes", "0"}, "horizon-bytes"},
		{[]string{"--horizon-bytes", "1TB"}, "horizon-bytes"},
		{[]string{"--format", "lines", "--field", "0"}, "--field"},
		{[]string{"--format", "lines", "--field", "-1"}, "--field"},
	} {
		args := append([]string{"filter"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "lines") {
			args = append(args, "--key", "id")
		}
		code, stdout, stderr := runCmd(t, `{"id":1}`+"\n", args...)
		if code != exitBad || !strings.Contains(stderr, tc.flag) || stdout != "" {
			t.Errorf("%v: exit %d, want %d naming %s (out %q): %s", tc.args, code, exitBad, tc.flag, stdout, stderr)
		}
	}
	// dedup stats takes the sizing flags too.
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if code, _, stderr := runCmd(t, "a\n", "filter", "--format", "lines", "--state", state); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// So does dedup kafka, before it dials a broker.
	for _, a := range [][]string{{"--window", "0"}, {"--fp", "0"}} {
		args := append([]string{"kafka", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "in", "--out-topic", "out", "--state", t.TempDir()}, a...)
		if code, _, stderr := runCmd(t, "", args...); code != exitBad || !strings.Contains(stderr, a[0]) {
			t.Errorf("kafka %v: exit %d, want %d naming %s: %s", a, code, exitBad, a[0], stderr)
		}
	}
	for _, a := range [][]string{{"--rate", "0"}, {"--fp", "0"}, {"--shards", "0"}} {
		if code, _, stderr := runCmd(t, "", append(append([]string{"stats"}, a...), state)...); code != exitBad || !strings.Contains(stderr, a[0]) {
			t.Errorf("stats %v: exit %d, want %d naming %s: %s", a, code, exitBad, a[0], stderr)
		}
	}
}

// TestEmptyKeyRejected: a JSON key member that is the empty string is an
// empty key, a reject, not a key shared by every such line.
func TestEmptyKeyRejected(t *testing.T) {
	code, stdout, stderr := runCmd(t, `{"id":""}`+"\n"+`{"id":""}`+"\n"+`{"id":"x"}`+"\n", "filter", "--key", "id")
	if code != 0 || stdout != `{"id":"x"}`+"\n" || strings.Count(stderr, "empty key") != 2 {
		t.Fatalf("exit %d, out %q: %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCmd(t, `{"a":1,"b":""}`+"\n"+`{"a":1,"b":"y"}`+"\n", "filter", "--key", "a,b")
	if code != 0 || stdout != `{"a":1,"b":"y"}`+"\n" || !strings.Contains(stderr, "<stdin>:1: empty key") {
		t.Fatalf("composite: exit %d, out %q: %s", code, stdout, stderr)
	}
}

// TestFinalSnapshotFailure: when every commit succeeded but the last
// snapshot cannot be written (here its folder is a file; on a full disk,
// ENOSPC), the run succeeds with a warning: the state is committed and the
// next start restores without that snapshot.
func TestFinalSnapshotFailure(t *testing.T) {
	for _, interval := range []string{"1m", "0"} {
		t.Run("snapshot-interval="+interval, func(t *testing.T) {
			dir := t.TempDir()
			in, out, state := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "state")
			args := []string{"filter", "--key", "id", "--state", state, "--in", in, "--out", out, "--snapshot-interval", interval}
			writeFile(t, in, ndjsonLines("a", 10))
			if code, _, stderr := runCmd(t, "", args...); code != 0 {
				t.Fatalf("first run: exit %d: %s", code, stderr)
			}
			snaps := filepath.Join(state, "snapshots")
			if err := os.RemoveAll(snaps); err != nil {
				t.Fatal(err)
			}
			writeFile(t, snaps, "not a folder\n")
			appendFile(t, in, ndjsonLines("b", 10))
			code, _, stderr := runCmd(t, "", args...)
			if code != 0 || !strings.Contains(stderr, "warning") || !strings.Contains(stderr, "snapshot") {
				t.Fatalf("failed final snapshot: exit %d, want 0 and a warning: %s", code, stderr)
			}
			if n := strings.Count(readFile(t, out), "\n"); n != 20 {
				t.Fatalf("out has %d lines, want 20", n)
			}
			// Committed: the same events again are duplicates.
			in2 := filepath.Join(dir, "in2")
			writeFile(t, in2, ndjsonLines("b", 10))
			if code, stdout, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, in2); code != 0 || stdout != "" {
				t.Fatalf("after: exit %d, out %q: %s", code, stdout, stderr)
			}
		})
	}
}

// TestSignalWhileIdle: SIGINT or SIGTERM stops a run blocked reading an
// idle stdin: what was read is committed, and it exits with status 1.
func TestSignalWhileIdle(t *testing.T) {
	dir := t.TempDir()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			state := filepath.Join(dir, "state-"+strconv.Itoa(int(sig)))
			code, stderr := signalIdle(t, sig, "filter", "--key", "id", "--state", state, "--progress", "never")
			if code != exitRuntime || !strings.Contains(stderr, "interrupted") {
				t.Fatalf("after %v: exit status %d, want %d: %s", sig, code, exitRuntime, stderr)
			}
			// The key read before the signal was committed.
			if code, out, errs := runCmd(t, `{"id":"first"}`+"\n", "filter", "--key", "id", "--state", state); code != 0 || out != "" {
				t.Fatalf("rerun: exit %d, out %q: %s", code, out, errs)
			}
		})
	}
}

// TestFlagErrorShort: a bad flag prints the error and a one-line hint,
// not the whole help; -h prints the help on stdout.
func TestFlagErrorShort(t *testing.T) {
	code, stdout, stderr := runCmd(t, "", "filter", "--nope")
	if code != exitBad || stdout != "" || strings.Count(stderr, "\n") > 2 || !strings.Contains(stderr, "-nope") || !strings.Contains(stderr, "dedup help filter") {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCmd(t, "", "stats", "--json=maybe", "x")
	if code != exitBad || strings.Count(stderr, "\n") > 2 || !strings.Contains(stderr, "dedup help stats") {
		t.Fatalf("stats: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	if code, stdout, _ := runCmd(t, "", "filter", "-h"); code != 0 || !strings.Contains(stdout, "Usage: dedup filter") {
		t.Fatalf("-h: exit %d, stdout %.100q", code, stdout)
	}
}

func TestVersion(t *testing.T) {
	for _, a := range []string{"--version", "-version", "version"} {
		code, stdout, stderr := runCmd(t, "", a)
		if code != 0 || !strings.HasPrefix(stdout, "dedup ") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("%s: exit %d, out %q: %s", a, code, stdout, stderr)
		}
	}
}

// TestHelpDefaults: no flag shows two defaults.
func TestHelpDefaults(t *testing.T) {
	for _, c := range []string{"filter", "stats", "backup", "restore"} {
		_, stdout, _ := runCmd(t, "", "help", c)
		for _, l := range strings.Split(stdout, "\n") {
			if strings.Count(l, "(default") > 1 {
				t.Errorf("help %s shows two defaults: %s", c, l)
			}
		}
	}
	_, stdout, _ := runCmd(t, "", "help", "filter")
	if strings.Contains(stdout, "--metrics :") || !strings.Contains(stdout, "127.0.0.1:9090") {
		t.Errorf("help filter: --metrics should show a loopback address:\n%s", stdout)
	}
}

// TestRejectsEscaped: a rejected line written to the terminal (stderr)
// has its control bytes and invalid UTF-8 escaped.
func TestRejectsEscaped(t *testing.T) {
	_, _, stderr := runCmd(t, "\x1b[31mred\x00\xff\r\n{\"id\":1}\n{\"id\":2}\n", "filter", "--key", "id")
	if strings.ContainsAny(stderr, "\x1b\x00\r") || !strings.Contains(stderr, `\x1b[31mred\x00\xff\r`) {
		t.Fatalf("stderr %q", stderr)
	}
}

// TestNothingCreatedOnEarlyFailure: what can fail before a run starts (a
// port in use for --metrics, a missing input) fails before --out is
// created or truncated.
func TestNothingCreatedOnEarlyFailure(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	writeFile(t, in, `{"id":1}`+"\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out := filepath.Join(dir, "out")
	if code, _, stderr := runCmd(t, "", "filter", "--key", "id", in, "--out", out, "--metrics", ln.Addr().String()); code == 0 || !strings.Contains(stderr, "metrics") {
		t.Fatalf("port in use: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("port in use: --out was created (%v)", err)
	}
	writeFile(t, out, "earlier\n")
	if code, _, stderr := runCmd(t, "", "filter", "--key", "id", filepath.Join(dir, "missing"), "--out", out); code != exitRuntime {
		t.Fatalf("missing input: exit %d: %s", code, stderr)
	}
	if got := readFile(t, out); got != "earlier\n" {
		t.Fatalf("missing input: --out truncated to %q", got)
	}
}

// TestProgressRate: the rate on the progress line is the input read over
// the time taken, not over the time since the bar was first drawn.
func TestProgressRate(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	writeFile(t, in, ndjsonLines("k", 200000))
	size := float64(len(readFile(t, in)))
	start := time.Now()
	code, _, stderr := runCmd(t, "", "filter", "--key", "id", in, "--out", filepath.Join(dir, "out"), "--progress", "always")
	el := time.Since(start).Seconds()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	m := regexp.MustCompile(`([0-9.]+) ([kMGTP]?B)/s`).FindAllStringSubmatch(stderr, -1)
	if len(m) == 0 {
		t.Fatalf("no rate in %q", stderr)
	}
	last := m[len(m)-1]
	v, _ := strconv.ParseFloat(last[1], 64)
	v *= map[string]float64{"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15}[last[2]]
	// The bar starts with the reading, so its rate is the input over the
	// reading's time: more than the input over the whole run's time by
	// what opening and closing the engine take, which under -race on a
	// loaded machine is most of the run. The bug this pins was off by a
	// factor of thousands.
	if v > 20*size/el {
		t.Fatalf("progress shows %s %s/s; %.0f bytes were read in %.3fs", last[1], last[2], size, el)
	}
}

// TestStatsInUse: dedup stats works on a state another process holds,
// from what it can read without the lock.
func TestStatsInUse(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if code, _, stderr := runCmd(t, "a\nb\n", "filter", "--format", "lines", "--state", state, "--window", "10m"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	stdin, stdout := startPiped(t, dedupProcess(t, "filter", "--format", "lines", "--state", state, "--progress", "never"))
	if _, err := io.WriteString(stdin, "c\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := stdout.ReadString('\n'); err != nil || line != "c\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	code, out, stderr := runCmd(t, "", "stats", state)
	if code != 0 || !strings.Contains(out, "window 10m0s") || !strings.Contains(out, "in use") {
		t.Fatalf("stats of a state in use: exit %d:\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCmd(t, "", "stats", "--json", state)
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("stats --json of a state in use: exit %d, %v:\n%s%s", code, err, out, stderr)
	}
}

// TestStatsJSONNames: dedup stats --json uses snake_case names and
// seconds for durations throughout.
func TestStatsJSONNames(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if code, _, stderr := runCmd(t, "a\nb\n", "filter", "--format", "lines", "--state", state); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, out, stderr := runCmd(t, "", "stats", "--json", state)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) {
					t.Errorf("%s.%s: not snake_case", path, k)
				}
				if strings.Contains(k, "duration") || strings.Contains(k, "latency") {
					if !strings.HasSuffix(k, "_seconds") {
						t.Errorf("%s.%s: a duration not named in seconds", path, k)
					}
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		}
	}
	walk("", v)
	if m, ok := v.(map[string]any); !ok || m["options"].(map[string]any)["window_seconds"] != 3600.0 {
		t.Errorf("options.window_seconds: %v", v)
	}
}

// TestHorizonBytesFlag: --horizon-bytes sets Options.HorizonBytes, and
// without it the engine's default holds.
func TestHorizonBytesFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int64
	}{
		{nil, engineDefaults.HorizonBytes},
		{[]string{"--horizon-bytes", "64KiB"}, 64 << 10},
		{[]string{"--horizon-bytes", "1000"}, 1000},
	} {
		var f engineFlags
		fs := flag.NewFlagSet("filter", flag.ContinueOnError)
		f.register(fs, tuneUsage)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := f.options("").HorizonBytes; got != tc.want {
			t.Errorf("%v: HorizonBytes %d, want %d", tc.args, got, tc.want)
		}
	}
}
