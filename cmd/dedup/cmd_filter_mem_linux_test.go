package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// exeMapping is one mapping of the executable, as /proc/self/smaps shows it.
type exeMapping struct {
	header    string
	perms     string
	rssKB     int
	anonKB    int
	sawFields bool
}

// exeMappings reads the mappings of the running executable.
func exeMappings(t *testing.T) []exeMapping {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Skipf("no /proc/self/exe: %v", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	var out []exeMapping
	var cur *exeMapping
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 {
			continue
		}
		if bytes.Contains(f[0], []byte("-")) && len(f) >= 5 {
			cur = nil
			if len(f) == 6 && string(f[5]) == exe {
				out = append(out, exeMapping{header: sc.Text(), perms: string(f[1])})
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		n, err := strconv.Atoi(string(f[1]))
		if err != nil {
			continue
		}
		switch string(f[0]) {
		case "Rss:":
			cur.rssKB, cur.sawFields = n, true
		case "Anonymous:":
			cur.anonKB = n
		}
	}
	return out
}

// TestReleaseStartupPages: the executable's read-only mappings leave the
// resident set (what start-up and the tests before touched of a binary of
// this size is tens of MiB), while a read-only mapping holding pages of its own (the dynamic
// linker's relocations) keeps them, and the program runs on: a filter run
// after the release gives its output.
//
// It measures in a fresh child process: in the test binary's own process
// an earlier test may have released the pages already (dedup serve and
// filter run in-process release them), leaving nothing to measure.
func TestReleaseStartupPages(t *testing.T) {
	if os.Getenv("DEDUP_RELEASE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReleaseStartupPages$", "-test.v")
		cmd.Env = append(os.Environ(), "DEDUP_RELEASE_CHILD=1")
		out, err := cmd.CombinedOutput()
		t.Logf("child:\n%s", out)
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		return
	}
	before := exeMappings(t)
	releasable, anon := 0, map[string]int{}
	for _, m := range before {
		if !m.sawFields {
			t.Skip("smaps without Rss fields")
		}
		if m.perms == "r-xp" || m.perms == "r--p" {
			if m.anonKB == 0 {
				releasable += m.rssKB
			} else {
				anon[m.header] = m.anonKB
			}
		}
	}
	if releasable < 4<<10 {
		t.Skipf("only %d KiB of the executable resident: nothing to measure", releasable)
	}
	releaseStartupPages()
	after := 0
	for _, m := range exeMappings(t) {
		if (m.perms == "r-xp" || m.perms == "r--p") && m.anonKB == 0 {
			after += m.rssKB
		}
		if want, ok := anon[m.header]; ok && m.anonKB != want {
			t.Errorf("%s: %d KiB of its own pages after the release, want %d (not released)", m.header, m.anonKB, want)
		}
	}
	t.Logf("read-only mappings of the executable: %d KiB resident before, %d KiB after; %d mappings with pages of their own kept", releasable, after, len(anon))
	// What the run uses faults back in at once (the code running, the
	// function tables the garbage collector reads), so not all of it
	// stays out.
	if after > releasable*3/4 {
		t.Errorf("read-only mappings of the executable: %d KiB resident after the release, %d KiB before: want at most 3/4", after, releasable)
	}
	if code, stdout, _ := runCmd(t, "{\"id\":2}\n{\"id\":3}\n{\"id\":2}\n", "filter", "--key", "id"); code != 0 || stdout != "{\"id\":2}\n{\"id\":3}\n" {
		t.Fatalf("filter after: exit %d, stdout %q", code, stdout)
	}
}
