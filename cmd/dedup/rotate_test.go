package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRotatedLogTailLost: the lines a log got after the last run and
// before logrotate moved it aside were lost: the error after a rotation
// offered only --from-start, which reads the new file and never the old
// one's tail, and giving the rotated file too (--in app.log.1 --in
// app.log) was refused as another job, or with --from-start read it all
// again, writing every event the window had forgotten a second time. Now
// the run finds the file holding the committed position among its inputs
// (by inode when renamed, by its bytes when copied) and resumes there.
func TestRotatedLogTailLost(t *testing.T) {
	for _, mode := range []string{"create", "copytruncate"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			log, rotated := filepath.Join(dir, "app.log"), filepath.Join(dir, "app.log.1")
			out, dups, state := filepath.Join(dir, "out"), filepath.Join(dir, "dups"), filepath.Join(dir, "state")
			filter := func(inputs ...string) (int, string) {
				t.Helper()
				args := []string{"filter", "--key", "id", "--state", state, "--out", out, "--dups", dups}
				for _, in := range inputs {
					args = append(args, "--in", in)
				}
				code, _, stderr := runCmd(t, "", args...)
				return code, stderr
			}
			rotate := func() {
				t.Helper()
				switch mode {
				case "create":
					if err := os.Rename(log, rotated); err != nil {
						t.Fatal(err)
					}
					writeFile(t, log, "")
				case "copytruncate":
					writeFile(t, rotated, readFile(t, log))
					if err := os.Truncate(log, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			writeFile(t, log, ndjsonLines("a", 100))
			if code, stderr := filter(log); code != 0 {
				t.Fatalf("first run: exit %d: %s", code, stderr)
			}
			// Written after the run, then rotated away, then new lines.
			appendFile(t, log, ndjsonLines("b", 50))
			rotate()
			appendFile(t, log, ndjsonLines("c", 30))

			code, stderr := filter(log)
			if code != exitRuntime || !strings.Contains(stderr, "--in "+rotated+" --in "+log) {
				t.Fatalf("rotated: exit %d, want %d and the hint to give %s first: %s", code, exitRuntime, rotated, stderr)
			}
			if code, stderr := filter(rotated, log); code != 0 {
				t.Fatalf("--in %s --in %s: exit %d: %s", rotated, log, code, stderr)
			}
			want := ndjsonLines("a", 100) + ndjsonLines("b", 50) + ndjsonLines("c", 30)
			if got := readFile(t, out); got != want {
				t.Fatalf("out holds %d lines, want %d (a1..a100, b1..b50, c1..c30)", strings.Count(got, "\n"), strings.Count(want, "\n"))
			}
			if got := readFile(t, dups); got != "" {
				t.Fatalf("the rotated file was read again: %d duplicates", strings.Count(got, "\n"))
			}

			// The same command from then on (cron): nothing new, then new
			// lines, then another rotation with a tail.
			if code, stderr := filter(rotated, log); code != 0 || readFile(t, out) != want {
				t.Fatalf("rerun: exit %d: %s", code, stderr)
			}
			appendFile(t, log, ndjsonLines("d", 20))
			rotate()
			appendFile(t, log, ndjsonLines("e", 10))
			if code, stderr := filter(rotated, log); code != 0 {
				t.Fatalf("second rotation: exit %d: %s", code, stderr)
			}
			want += ndjsonLines("d", 20) + ndjsonLines("e", 10)
			if got := readFile(t, out); got != want {
				t.Fatalf("second rotation: out holds %d lines, want %d", strings.Count(got, "\n"), strings.Count(want, "\n"))
			}
			if got := readFile(t, dups); got != "" {
				t.Fatalf("second rotation: %d duplicates", strings.Count(got, "\n"))
			}
		})
	}
}

// TestRotatedLogTailLost_positionNotFirst: the position's file found after
// another input is refused: that input would be taken as read unread.
func TestRotatedLogTailLost_positionNotFirst(t *testing.T) {
	dir := t.TempDir()
	log, other := filepath.Join(dir, "app.log"), filepath.Join(dir, "other.log")
	out, state := filepath.Join(dir, "out"), filepath.Join(dir, "state")
	writeFile(t, log, ndjsonLines("a", 10))
	writeFile(t, other, ndjsonLines("o", 10))
	if code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, "--out", out, "--in", log); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	code, _, stderr := runCmd(t, "", "filter", "--key", "id", "--state", state, "--out", out, "--in", other, "--in", log)
	if code != exitBad || !strings.Contains(stderr, "give it first") {
		t.Fatalf("position's file second: exit %d, want %d: %s", code, exitBad, stderr)
	}
	if got := readFile(t, out); got != ndjsonLines("a", 10) {
		t.Fatalf("out changed: %q", got)
	}
}

// TestRotatedTwiceHint: rotated twice between runs, with the rotated file
// given already, the error told the operator to give it first; it says
// to add the older one.
func TestRotatedTwiceHint(t *testing.T) {
	dir := t.TempDir()
	log, out, state := filepath.Join(dir, "app.log"), filepath.Join(dir, "out"), filepath.Join(dir, "state")
	args := []string{"filter", "--key", "id", "--state", state, "--out", out, "--in", log + ".1", "--in", log}
	writeFile(t, log+".1", "")
	writeFile(t, log, ndjsonLines("a", 10))
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	for range 2 {
		if err := os.Rename(log+".1", log+".2"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(log, log+".1"); err != nil {
			t.Fatal(err)
		}
		writeFile(t, log, ndjsonLines("b", 10))
	}
	code, _, stderr := runCmd(t, "", args...)
	if code != exitRuntime || !strings.Contains(stderr, "--in "+log+".2") {
		t.Fatalf("rotated twice: exit %d, want %d and a hint at %s.2: %s", code, exitRuntime, log, stderr)
	}
	// Given, the older one holds the position.
	if code, _, stderr := runCmd(t, "", append(args[:len(args)-4], "--in", log+".2", "--in", log+".1", "--in", log)...); code != 0 {
		t.Fatalf("with %s.2: exit %d: %s", log, code, stderr)
	}
	if got, want := readFile(t, out), ndjsonLines("a", 10)+ndjsonLines("b", 10); got != want {
		t.Fatalf("out %q, want %q", got, want)
	}
}

// TestRotatedLogGrewAfterRead: lines a writer appends to app.log.1 after a
// run read it to its end (it had not reopened its log yet) are not read,
// and nothing said so. The run warns, naming the file.
func TestRotatedLogGrewAfterRead(t *testing.T) {
	dir := t.TempDir()
	log, out, state := filepath.Join(dir, "app.log"), filepath.Join(dir, "out"), filepath.Join(dir, "state")
	args := []string{"filter", "--key", "id", "--state", state, "--out", out, "--in", log + ".1", "--in", log}
	writeFile(t, log+".1", ndjsonLines("a", 10))
	writeFile(t, log, ndjsonLines("b", 10))
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", args...); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("rerun: exit %d: %s", code, stderr)
	}
	appendFile(t, log+".1", ndjsonLines("late", 2))
	code, _, stderr := runCmd(t, "", args...)
	if code != 0 || !strings.Contains(stderr, "warning: "+log+".1 got") {
		t.Fatalf("grown: exit %d, want 0 and a warning naming %s.1: %s", code, log, stderr)
	}
	// Once.
	if code, _, stderr := runCmd(t, "", args...); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("after the warning: exit %d: %s", code, stderr)
	}
}
