//go:build linux

package resp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamdedup/dedup/resp"
)

// fdChildEnv makes this test binary the server child of
// TestAcceptBacksOffWhenOutOfFiles, with that many file descriptors.
const fdChildEnv = "DEDUP_RESP_FD_CHILD_LIMIT"

// TestAcceptBacksOffWhenOutOfFiles: a server out of file descriptors
// (EMFILE: more clients than its ulimit allows, below --max-clients) backs
// off its accepts as net/http does, rather than retrying at once and
// spinning a core for as long as the clients stay, and counts the failures.
func TestAcceptBacksOffWhenOutOfFiles(t *testing.T) {
	if lim := os.Getenv(fdChildEnv); lim != "" {
		n, _ := strconv.ParseUint(lim, 10, 64)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		serveInChild(resp.Options{})
	}
	_, addr := startServerChild(t, "TestAcceptBacksOffWhenOutOfFiles", fdChildEnv+"=32")

	// Hold more connections than the child has descriptors: the kernel
	// completes them in the listen backlog, the child's accept fails.
	var conns []net.Conn
	for range 64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	for _, c := range conns {
		c.Close()
	}

	// Once the clients are gone the server serves again.
	var info string
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "INFO stats\r\n")
		r := bufio.NewReader(c)
		hdr, err := r.ReadString('\n')
		if err == nil && strings.HasPrefix(hdr, "$") {
			n, _ := strconv.Atoi(strings.TrimSpace(hdr[1:]))
			b := make([]byte, n)
			_, err = io.ReadFull(r, b)
			info = string(b)
		}
		c.Close()
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatalf("server does not answer after the clients left: %v", err)
		}
	}
	_, rest, ok := strings.Cut(info, "accept_errors:")
	if !ok {
		t.Fatalf("INFO stats has no accept_errors:\n%s", info)
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\r\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	// Retrying at once fails hundreds of thousands of times a second;
	// backing off from 5ms to 1s, about ten times in that second.
	t.Logf("%d failed accepts while out of descriptors for 1s", n)
	if n == 0 {
		t.Errorf("no failed accept: the child was not out of descriptors")
	}
	if n > 100 {
		t.Errorf("%d failed accepts in about a second: the accept loop spins", n)
	}
}
