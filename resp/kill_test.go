package resp_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/resp"
)

// childEnv names the state directory when this test binary runs as the
// server child of TestKillAlways.
const childEnv = "RESP_KILL_CHILD_DIR"

// serveChild serves FsyncAlways on dir, prints the address and serves
// until killed.
func serveChild(dir string) {
	srv, err := resp.New(resp.Config{Dir: dir, Fsync: resp.FsyncAlways})
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

// startChild runs this test binary as a server on dir.
func startChild(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillAlways$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
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

// TestKillAlways: under FsyncAlways, a server killed with SIGKILL in the
// middle of concurrent pipelined writes forgets no key it answered new.
func TestKillAlways(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		serveChild(dir)
		return
	}
	dir := t.TempDir()
	cmd, addr := startChild(t, dir)

	const writers, batch, killAfter = 4, 25, 3000
	var (
		mu    sync.Mutex
		acked []string
		n     atomic.Int64
		wg    sync.WaitGroup
	)
	killed := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			for i := 0; ; i++ {
				pipe := c.Pipeline()
				keys := make([]string, batch)
				cmds := make([]*redis.BoolCmd, batch)
				for j := range keys {
					keys[j] = fmt.Sprintf("w%d-%d-%d", w, i, j)
					ttl := time.Duration(0) // SETNX
					if j%2 == 0 {
						ttl = time.Minute // SET NX EX
					}
					cmds[j] = pipe.SetNX(t.Context(), keys[j], 1, ttl)
				}
				_, _ = pipe.Exec(t.Context())
				var ok []string
				for j, cmd := range cmds {
					if v, err := cmd.Result(); err == nil && v {
						ok = append(ok, keys[j])
					}
				}
				mu.Lock()
				acked = append(acked, ok...)
				mu.Unlock()
				n.Add(int64(len(ok)))
				select {
				case <-killed:
					return
				default:
				}
			}
		}()
	}
	for n.Load() < killAfter {
		time.Sleep(time.Millisecond)
	}
	// Kill while the writers are still sending.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	close(killed)
	wg.Wait()

	_, addr = startChild(t, dir)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	pipe := c.Pipeline()
	cmds := make([]*redis.BoolCmd, len(acked))
	for i, k := range acked {
		cmds[i] = pipe.SetNX(t.Context(), k, 1, 0)
	}
	if _, err := pipe.Exec(t.Context()); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	lost := 0
	for i, cmd := range cmds {
		if v, err := cmd.Result(); err != nil || v {
			lost++
			if lost <= 5 {
				t.Errorf("key %s was answered new before the kill and is new again after (%v)", acked[i], err)
			}
		}
	}
	t.Logf("%d keys acknowledged before SIGKILL, %d lost", len(acked), lost)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged keys lost", lost, len(acked))
	}
}
