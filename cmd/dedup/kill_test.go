package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildBinary compiles the command into dir and returns its path.
func buildBinary(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "dedup")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// genEvents writes n NDJSON events whose keys repeat at distances from 1
// to n, with a few bad lines, and returns the expected distinct output,
// duplicates and number of rejects.
func genEvents(t testing.TB, path string, n int, seed uint64) (distinct, dups []byte, rejects int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	var in, out, dup bytes.Buffer
	var keys []int // key of each good event, in order
	seen := map[int]bool{}
	next := 0
	for i := range n {
		var line string
		switch x := r.Float64(); {
		case x < 0.002:
			line = fmt.Sprintf(`{"event_id":"broken-%d"`, i)
			rejects++
		case x < 0.35 && len(keys) > 0:
			// A redelivery at a distance spread over every scale.
			scale := []int{1, 10, 100, 1000, 10000, 100000}[r.IntN(6)]
			d := 1 + r.IntN(scale)
			k := keys[max(0, len(keys)-d)]
			line = fmt.Sprintf(`{"event_id":"ev-%08d","attempt":%d,"pad":"%s"}`, k, i, strings.Repeat("x", r.IntN(40)))
			keys = append(keys, k)
		default:
			k := next
			next++
			line = fmt.Sprintf(`{"event_id":"ev-%08d","attempt":%d,"pad":"%s"}`, k, i, strings.Repeat("x", r.IntN(40)))
			keys = append(keys, k)
		}
		in.WriteString(line + "\n")
		if strings.HasPrefix(line, `{"event_id":"broken`) {
			continue
		}
		k := keys[len(keys)-1]
		if seen[k] {
			dup.WriteString(line + "\n")
		} else {
			seen[k] = true
			out.WriteString(line + "\n")
		}
	}
	if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), dup.Bytes(), rejects
}

// TestKill9ExactlyOnce runs the real binary on a real state directory,
// SIGKILLs it at random moments many times, then runs the same command
// until it succeeds: the output must hold every distinct event exactly
// once, in input order, and the duplicates and rejects files must match.
func TestKill9ExactlyOnce(t *testing.T) {
	n, rounds := 200000, 15
	if testing.Short() {
		n, rounds = 100000, 5
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	in := filepath.Join(dir, "in.ndjson")
	wantOut, wantDups, wantRejects := genEvents(t, in, n, 42)
	out, dups, rej := filepath.Join(dir, "out.ndjson"), filepath.Join(dir, "dups.ndjson"), filepath.Join(dir, "rejects.txt")
	args := []string{"filter", "--state", filepath.Join(dir, "state"), "--key", "event_id",
		"--in", in, "--out", out, "--dups", dups, "--rejects", rej,
		"--commit-every", "1000", "--chunk", "65536", "--progress", "never"}

	// Time one whole run (on a scratch state) so the kills land inside a
	// run however fast this machine is.
	scratch := filepath.Join(dir, "scratch")
	sargs := []string{"filter", "--state", filepath.Join(scratch, "state"), "--key", "event_id",
		"--in", in, "--out", filepath.Join(scratch, "out"), "--commit-every", "1000", "--progress", "never"}
	start := time.Now()
	if b, err := exec.Command(bin, sargs...).CombinedOutput(); err != nil {
		t.Fatalf("timing run: %v\n%s", err, b)
	}
	whole := time.Since(start)
	_ = os.RemoveAll(scratch)

	r := rand.New(rand.NewPCG(7, 7))
	killed, finished := 0, false
	for round := 0; round < rounds && !finished; round++ {
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wait := make(chan error, 1)
		go func() { wait <- cmd.Wait() }()
		// Each run resumes where the last left off, so later rounds have
		// less to do (and a loaded machine runs slower than the timing
		// run): kill within the first fifth of a whole run's time.
		delay := whole/50 + time.Duration(r.Int64N(int64(whole/5)))
		select {
		case err := <-wait:
			if err != nil {
				t.Fatalf("round %d: %v\n%s", round, err, stderr.String())
			}
			finished = true
		case <-time.After(delay):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			if err := <-wait; err == nil {
				finished = true // it completed just before the kill
			} else {
				killed++
			}
		}
		if fi, err := os.Stat(out); err == nil {
			t.Logf("round %d: after %v, output %d of %d bytes", round, delay, fi.Size(), len(wantOut))
		}
	}
	for i := 0; ; i++ {
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if err == nil {
			break
		}
		if i == 3 {
			t.Fatalf("final run: %v\n%s", err, stderr.String())
		}
	}
	t.Logf("%d events, killed %d times", n, killed)
	if killed < min(3, rounds) {
		t.Errorf("only %d of %d rounds were killed mid-run: the input is too small for this machine", killed, rounds)
	}
	compareFile(t, out, wantOut)
	compareFile(t, dups, wantDups)
	got, err := os.ReadFile(rej)
	if err != nil {
		t.Fatal(err)
	}
	if c := bytes.Count(got, []byte("\n")); c != wantRejects {
		t.Errorf("rejects file has %d records, want %d", c, wantRejects)
	}
}

// compareFile checks that path holds want, naming the first differing line.
func compareFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range min(len(gl), len(wl)) {
		if !bytes.Equal(gl[i], wl[i]) {
			t.Fatalf("%s: line %d is %q, want %q (%d lines, want %d)", filepath.Base(path), i+1, gl[i], wl[i], len(gl), len(wl))
		}
	}
	t.Fatalf("%s: %d lines, want %d", filepath.Base(path), len(gl), len(wl))
}
