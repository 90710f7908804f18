package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procMem reads a process's resident memory now and at its peak
// (VmRSS, VmHWM), in bytes. ok is false where /proc does not tell.
func procMem(pid int) (rss, peak uint64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	field := func(name string) uint64 {
		_, rest, found := strings.Cut(string(b), "\n"+name+":")
		if !found {
			return 0
		}
		f := strings.Fields(rest)
		if len(f) < 2 || f[1] != "kB" {
			return 0
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		return n << 10
	}
	rss, peak = field("VmRSS"), field("VmHWM")
	return rss, peak, rss > 0 && peak > 0
}

// streamSetNX sends total bytes of pipelined SET key <value> NX EX 3600 on
// one connection to addr in writes that do not align with commands, while
// a reader reads every reply. The keys cycle over 10,000 names, so the
// server remembers a fixed set. base is called once warm bytes are sent.
func streamSetNX(t *testing.T, addr string, total, warm int, base func()) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	val := strings.Repeat("v", 1000)
	var one bytes.Buffer
	const keys = 10000
	for i := 0; i < keys; i++ {
		k := "stream:" + strconv.Itoa(i)
		fmt.Fprintf(&one, "*6\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$2\r\nNX\r\n$2\r\nEX\r\n$4\r\n3600\r\n", len(k), k, len(val), val)
	}
	round := one.Bytes()
	replies := make(chan error, 1)
	cmds := 0
	for sent := 0; sent < total; sent += len(round) {
		cmds += keys
	}
	go func() {
		r := bufio.NewReaderSize(c, 64<<10)
		for i := 0; i < cmds; i++ {
			line, err := r.ReadSlice('\n')
			if err != nil {
				replies <- fmt.Errorf("reply %d: %v", i, err)
				return
			}
			if s := string(line); s != "+OK\r\n" && s != "$-1\r\n" {
				replies <- fmt.Errorf("reply %d: %q", i, s)
				return
			}
		}
		replies <- nil
	}()
	const chunk = 61 << 10 // a size no command aligns with
	based := false
	for sent := 0; sent < total; sent += len(round) {
		for off := 0; off < len(round); off += chunk {
			if _, err := c.Write(round[off:min(off+chunk, len(round))]); err != nil {
				t.Fatalf("after %d bytes: %v", sent+off, err)
			}
		}
		if !based && sent >= warm {
			base()
			based = true
		}
	}
	if err := <-replies; err != nil {
		t.Fatal(err)
	}
}

// TestServeStreamingClientMemoryFlat: one client streaming 300 MiB of
// pipelined SET NX EX while reading every reply leaves the server's RSS
// near flat: a connection's read buffer holds one command, whatever the
// client has sent. redis-server's growth on the same load is logged
// beside it when it is installed (not under -short).
func TestServeStreamingClientMemoryFlat(t *testing.T) {
	if _, _, ok := procMem(os.Getpid()); !ok {
		t.Skip("no /proc/PID/status here")
	}
	bin := buildBinary(t, t.TempDir())
	const total, warm = 300 << 20, 32 << 20
	s := startServe(t, bin, "--window", "1h", "--fsync", "no")
	pid := s.cmd.Process.Pid
	var baseRSS uint64
	streamSetNX(t, s.addr, total, warm, func() { baseRSS, _, _ = procMem(pid) })
	_, peak, _ := procMem(pid)
	growth := int64(peak) - int64(baseRSS)
	t.Logf("dedup serve: RSS %d MiB after %d MiB sent, peak %d MiB after %d MiB: growth %d MiB",
		baseRSS>>20, warm>>20, peak>>20, total>>20, growth>>20)
	if growth > 48<<20 {
		t.Errorf("RSS grew by %d MiB while one client streamed %d MiB and read every reply", growth>>20, total>>20)
	}
	if srv, err := exec.LookPath("redis-server"); err == nil && !testing.Short() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command(srv, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		addr := "127.0.0.1:" + strconv.Itoa(port)
		for i := 0; ; i++ {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
				break
			}
			if i == 100 {
				t.Fatalf("redis-server did not listen: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var rbase uint64
		streamSetNX(t, addr, total, warm, func() { rbase, _, _ = procMem(cmd.Process.Pid) })
		_, rpeak, _ := procMem(cmd.Process.Pid)
		t.Logf("redis-server: RSS %d MiB after %d MiB sent, peak %d MiB: growth %d MiB",
			rbase>>20, warm>>20, rpeak>>20, (int64(rpeak)-int64(rbase))>>20)
	}
}

// TestServeClientThatNeverReadsIsBounded: a client that pipelines ECHO of
// 1 KiB and never reads a reply makes the server queue replies up to the
// reply cap (64 MiB), then stop reading it: the client's writes block, and
// the server's RSS grows by no more than the cap and its buffers.
func TestServeClientThatNeverReadsIsBounded(t *testing.T) {
	if _, _, ok := procMem(os.Getpid()); !ok {
		t.Skip("no /proc/PID/status here")
	}
	bin := buildBinary(t, t.TempDir())
	s := startServe(t, bin, "--window", "1h")
	pid := s.cmd.Process.Pid
	base, _, _ := procMem(pid)
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	line := []byte("ECHO " + strings.Repeat("x", 1019) + "\r\n")
	var batch []byte
	for range 64 {
		batch = append(batch, line...)
	}
	const limit = 1 << 30
	sent := 0
	for sent < limit {
		// The server stops reading once the replies fill its cap: a
		// write that cannot complete for 3 s shows it has.
		_ = c.SetWriteDeadline(time.Now().Add(3 * time.Second))
		n, err := c.Write(batch)
		sent += n
		if err != nil {
			break
		}
	}
	_, peak, _ := procMem(pid)
	growth := int64(peak) - int64(base)
	t.Logf("sent %d MiB unread; RSS %d MiB before, peak %d MiB: growth %d MiB", sent>>20, base>>20, peak>>20, growth>>20)
	if sent >= limit {
		t.Fatalf("the server read %d MiB from a client that reads no reply", sent>>20)
	}
	if growth > (64+48)<<20 {
		t.Errorf("RSS grew by %d MiB for a client that never reads; the reply cap is 64 MiB", growth>>20)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 0))
}
