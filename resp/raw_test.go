package resp_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/resp"
)

// raw sends req on a fresh connection and returns everything the server
// answers until it closes the connection (or, with keep, until n lines).
func raw(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	// A deadline keeps a server that never closes from hanging the test.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	// A server that closes with our request unread resets the connection:
	// what it wrote before is still the answer.
	if err != nil && !(errors.Is(err, syscall.ECONNRESET) && len(b) > 0) {
		t.Fatalf("reading the answer to %q: %v (got %q)", req, err, b)
	}
	return string(b)
}

// TestProtocolGarbage: a malformed or oversized request is answered an
// error and its connection closed (ReadAll returns), the commands before
// it in the same pipeline are answered, and the server serves on.
func TestProtocolGarbage(t *testing.T) {
	_, addr := start(t, resp.Options{MaxArgSize: 1000, MaxArgs: 10, MaxCommandSize: 2000})
	healthy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	hr := bufio.NewReader(healthy)
	ping := func() {
		t.Helper()
		io.WriteString(healthy, "PING\r\n")
		line, err := hr.ReadString('\n')
		if err != nil || line != "+PONG\r\n" {
			t.Fatalf("healthy connection: %q, %v", line, err)
		}
	}
	ping()
	for _, tc := range []struct {
		name, req, want string
	}{
		{"bad multibulk length", "*abc\r\n", "-ERR Protocol error"},
		{"bad bulk length", "*1\r\n$x\r\n", "-ERR Protocol error"},
		{"missing dollar", "*1\r\n+PING\r\n", "-ERR Protocol error"},
		{"negative count is skipped, as Redis does", "*-5\r\n*0\r\nPING\r\nQUIT\r\n", "+PONG\r\n+OK\r\n"},
		{"star then junk, no newline", "*\x00" + strings.Repeat("payload", 1000), "-ERR Protocol error: invalid multibulk length"},
		{"carriage returns in a header", "*1" + strings.Repeat("\r", 1000), "-ERR Protocol error"},
		{"dollar then junk", "*1\r\n$-" + strings.Repeat("-", 1000), "-ERR Protocol error: invalid bulk length"},
		{"unbalanced quotes", "SET \"k v NX\r\n", "-ERR Protocol error"},
		{"oversized argument", "*2\r\n$4\r\nPING\r\n$999999999\r\n", "-ERR Protocol error: argument of 999999999 bytes exceeds max-arg-size 1000"},
		{"too many arguments", "*11\r\n", "-ERR Protocol error: command of 11 arguments exceeds max-args 10"},
		{"oversized command", "*4\r\n$6\r\nBF.ADD\r\n$1\r\nt\r\n$999\r\n" + strings.Repeat("x", 999) + "\r\n$999\r\n", "-ERR Protocol error: command of more than 2005 bytes exceeds max-command-size 2000"},
		{"huge number", "*99999999999999999999999\r\n", "-ERR Protocol error: header number too large"},
		{"inline line too long", strings.Repeat("a", 70<<10), "-ERR Protocol error: inline command longer than"},
		{"commands before are served", "PING\r\n*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$5000\r\n", "+PONG\r\n+PONG\r\n-ERR Protocol error: argument of 5000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := raw(t, addr, tc.req)
			if !strings.HasPrefix(got, tc.want) && !strings.Contains(got, tc.want) {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
			ping()
		})
	}
	// A large argument within the limit is served, split across writes.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	val := strings.Repeat("v", 999)
	req := fmt.Sprintf("*3\r\n$5\r\nSETNX\r\n$3\r\nbig\r\n$%d\r\n%s\r\n", len(val), val)
	for i := 0; i < len(req); i += 7 {
		io.WriteString(c, req[i:min(i+7, len(req))])
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != ":1\r\n" {
		t.Errorf("SETNX of a 999-byte value: %q, %v", line, err)
	}
}

func TestMaxClients(t *testing.T) {
	srv, addr := start(t, resp.Options{MaxClients: 2})
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "PING\r\n")
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+PONG\r\n" {
			t.Fatalf("client within the limit: %q, %v", line, err)
		}
		conns = append(conns, c)
	}
	if got := raw(t, addr, "PING\r\n"); got != "-ERR max number of clients reached\r\n" {
		t.Errorf("third client got %q", got)
	}
	if st := srv.Stats(); st.RejectedConnections != 1 || st.Clients != 2 {
		t.Errorf("stats %+v", st)
	}
	// QUIT frees a place.
	io.WriteString(conns[0], "QUIT\r\n")
	if b, _ := io.ReadAll(conns[0]); string(b) != "+OK\r\n" {
		t.Errorf("QUIT answered %q", b)
	}
	for srv.Stats().Clients > 1 {
		time.Sleep(time.Millisecond)
	}
	if got := raw(t, addr, "PING\r\nQUIT\r\n"); got != "+PONG\r\n+OK\r\n" {
		t.Errorf("client after QUIT got %q", got)
	}
}

// TestManyClients: concurrent clients race for overlapping keys; under
// every durability mode each key is answered new exactly once.
func TestManyClients(t *testing.T) {
	for _, fsync := range []string{resp.FsyncAlways, resp.FsyncEverySec} {
		t.Run(fsync, func(t *testing.T) {
			_, addr := start(t, resp.Options{Dir: t.TempDir(), Fsync: fsync})
			const clients, keys, rounds = 12, 300, 3
			var mu sync.Mutex
			wins := map[string]int{}
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for g := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := client(t, addr)
					for r := range rounds {
						pipe := c.Pipeline()
						var names []string
						for i := range keys {
							k := fmt.Sprintf("k%d", (i*7+g*13+r*29)%keys)
							names = append(names, k)
							pipe.SetNX(t.Context(), k, 1, time.Minute)
							if i%50 == 0 {
								pipe.Exists(t.Context(), k)
							}
						}
						cmds, err := pipe.Exec(t.Context())
						if err != nil && err.Error() != "redis: nil" {
							errs <- err
							return
						}
						mu.Lock()
						j := 0
						for _, cmd := range cmds {
							if cmd.Name() != "set" && cmd.Name() != "setnx" {
								continue
							}
							if cmd.(*redis.BoolCmd).Val() {
								wins[names[j]]++
							}
							j++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if len(wins) != keys {
				t.Errorf("%d keys won, want %d", len(wins), keys)
			}
			for k, n := range wins {
				if n != 1 {
					t.Errorf("key %s answered new %d times", k, n)
				}
			}
		})
	}
}

// remoteListener reports every connection it accepts as coming from
// 192.0.2.7 (TEST-NET-1): the connections are real loopback ones, since
// tests listen on 127.0.0.1 only.
type remoteListener struct{ net.Listener }

func (l remoteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteConn{c}, nil
}

type remoteConn struct{ net.Conn }

func (remoteConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}
}

// TestProtectedMode: a server without a password serves loopback clients
// only, as Redis's protected mode, unless Unprotected says otherwise, so
// nobody who merely reaches its address can mark keys and drop other
// people's events.
func TestProtectedMode(t *testing.T) {
	serve := func(cfg resp.Options, remote bool) string {
		t.Helper()
		srv, ln := listen(t, cfg)
		addr := ln.Addr().String()
		if remote {
			ln = remoteListener{ln}
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		defer func() { srv.Shutdown(); <-done }()
		return raw(t, addr, "PING\r\nQUIT\r\n")
	}
	if got := serve(resp.Options{}, true); !strings.HasPrefix(got, "-DENIED ") {
		t.Errorf("remote client without a password configured: %q, want -DENIED", got)
	}
	if got := serve(resp.Options{}, false); got != "+PONG\r\n+OK\r\n" {
		t.Errorf("loopback client without a password configured: %q", got)
	}
	if got := serve(resp.Options{RequirePass: "pw"}, true); !strings.HasPrefix(got, "-NOAUTH") {
		t.Errorf("remote client with a password configured: %q, want -NOAUTH", got)
	}
	if got := serve(resp.Options{Unprotected: true}, true); got != "+PONG\r\n+OK\r\n" {
		t.Errorf("remote client, unprotected: %q", got)
	}
}

// TestBigPipelineDoesNotDeadlock: go-redis and redis-py write a whole
// pipeline before they read a reply. The server wrote its replies as it
// read the commands, blocking once the client's socket buffers were full,
// and so stopped reading: a pipeline whose requests and replies both
// outgrow the socket buffers (a few MB) hung until a timeout broke the
// connection, where Redis serves it. Replies now queue (up to
// MaxReplyBuffer) while the server reads on.
func TestBigPipelineDoesNotDeadlock(t *testing.T) {
	_, addr := start(t, resp.Options{})
	c := client(t, addr)
	const calls, size = 8000, 4096 // 32 MiB each way
	arg := strings.Repeat("x", size)
	pipe := c.Pipeline()
	for range calls {
		pipe.Echo(t.Context(), arg)
	}
	cmds, err := pipe.Exec(t.Context())
	if err != nil {
		t.Fatalf("pipeline of %d ECHO of %d bytes: %v", calls, size, err)
	}
	for i, cmd := range cmds {
		if v, _ := cmd.(*redis.StringCmd).Result(); v != arg {
			t.Fatalf("reply %d: %d bytes, want the %d sent", i, len(v), size)
		}
	}
}

// TestReplyBufferBounded: the replies queued for a client that does not
// read them are bounded: past MaxReplyBuffer the server stops reading the
// client, and a client that reads nothing for WriteTimeout is cut off, so
// a pipeline of 64 MiB never read cannot make the server hold 64 MiB.
func TestReplyBufferBounded(t *testing.T) {
	srv, addr := start(t, resp.Options{MaxReplyBuffer: 1 << 20, WriteTimeout: time.Second})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := []byte(fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$4096\r\n%s\r\n", strings.Repeat("x", 4096)))
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	var sent int
	for sent < 64<<20 {
		n, err := c.Write(cmd)
		sent += n
		if err != nil {
			break
		}
	}
	if sent >= 64<<20 {
		t.Fatalf("the server read %d bytes of requests whose replies were never read", sent)
	}
	if got := srv.Stats().NetInputBytes; got > 32<<20 {
		t.Errorf("the server read %d bytes before it stopped reading", got)
	}
}
