package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestStartRSS: the built binary, just written by go build, holds little
// resident before its first key: dedup filter at most 24 MiB while it
// waits for its first line (measured 9-21 MiB, 21-26 MiB without the
// eviction of the executable's pages after start-up), dedup serve at most
// 32 MiB once it listens (measured 14-18 MiB, 42-53 MiB without).
func TestStartRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	settle := func(pid int) uint64 {
		time.Sleep(time.Second)
		rss, _, ok := procMem(pid)
		if !ok {
			t.Skip("no VmRSS in /proc")
		}
		return rss
	}

	filter := exec.Command(bin, "filter", "--format", "lines")
	in, err := filter.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Start(); err != nil {
		t.Fatal(err)
	}
	rss := settle(filter.Process.Pid)
	in.Close()
	if err := filter.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("dedup filter before its first line: %.1f MiB resident", float64(rss)/(1<<20))
	if rss > 24<<20 {
		t.Errorf("dedup filter holds %.1f MiB resident before its first line, want at most 24", float64(rss)/(1<<20))
	}

	serve := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--state", dir+"/state")
	errp, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()
	sc := bufio.NewScanner(errp)
	for sc.Scan() && !strings.Contains(sc.Text(), "listening on") {
	}
	go func() {
		for sc.Scan() {
		}
	}()
	rss = settle(serve.Process.Pid)
	if err := serve.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := serve.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("dedup serve listening: %.1f MiB resident", float64(rss)/(1<<20))
	if rss > 32<<20 {
		t.Errorf("dedup serve holds %.1f MiB resident once it listens, want at most 32", float64(rss)/(1<<20))
	}
}
