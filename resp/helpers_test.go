package resp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/resp"
)

// Helpers shared by the tests of package resp.

// listen makes a server of cfg and a loopback listener for it; the caller
// serves and shuts it down.
func listen(t testing.TB, cfg resp.Options) (*resp.Server, net.Listener) {
	t.Helper()
	srv, err := resp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, ln
}

// start serves cfg on a loopback port and shuts it down with the test.
func start(t testing.TB, cfg resp.Options) (*resp.Server, string) {
	t.Helper()
	srv, ln := listen(t, cfg)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Error(err)
		}
		if err := <-done; !errors.Is(err, resp.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return srv, ln.Addr().String()
}

// clientTimeout bounds a test client's reads and writes: far above go-redis's
// 3 s default, which a 32 MiB pipeline or a restart under a loaded CI
// machine's -race can exceed, so that a slow machine is not a failure.
const clientTimeout = time.Minute

// client is a go-redis client of addr speaking RESP2 (Protocol 2): the
// replies these tests check are RESP2's; resp3_test.go checks RESP3's.
func client(t *testing.T, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, MaxRetries: -1, Protocol: 2}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

var ctx = context.Background()

// doer returns a function that sends a command through c and returns its
// reply printed, or "error: " and the error.
func doer(t *testing.T, c *redis.Client) func(args ...any) string {
	return func(args ...any) string {
		t.Helper()
		v, err := c.Do(ctx, args...).Result()
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprint(v)
	}
}

// serveInChild is the body of a test binary run as a server child: it
// serves cfg on a loopback port, prints "addr ADDR" and serves until
// killed; on a failure it prints "error: ..." and exits 1.
func serveInChild(cfg resp.Options) {
	srv, err := resp.New(cfg)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("addr", ln.Addr())
	_ = srv.Serve(ln)
	os.Exit(0)
}

// startServerChild runs this test binary as a server child (the test
// named run, with env added, calling serveInChild), kills it when the test
// ends and returns it with the address it serves.
func startServerChild(t *testing.T, run string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "addr ")
	if err != nil || !ok {
		t.Fatalf("child said %q, %v", line, err)
	}
	return cmd, addr
}
