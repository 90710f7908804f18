package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// child is a running subcommand of the dedup binary (serve, proxy) that
// listens on a free loopback port.
type child struct {
	cmd  *exec.Cmd
	addr string // the host:port it printed after "listening on "
	// done receives cmd.Wait's result once the child has exited and all of
	// its standard error is in log.
	done chan error
	mu   sync.Mutex // guards log while the child runs
	log  *strings.Builder
}

// startChild runs `bin sub --listen 127.0.0.1:0 args...` and reads its
// standard error until it says where it listens; the rest goes on into
// log. A cleanup kills the child and waits for it.
func startChild(t *testing.T, bin, sub string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(bin, append([]string{sub, "--listen", "127.0.0.1:0"}, args...)...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan error, 1), log: &strings.Builder{}}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	r := bufio.NewReader(pipe)
	for c.addr == "" {
		line, err := r.ReadString('\n')
		c.log.WriteString(line)
		if err != nil {
			_ = cmd.Process.Kill()
			c.done <- cmd.Wait()
			t.Fatalf("dedup %s did not start: %v\n%s", sub, err, c.log)
		}
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			c.addr, _, _ = strings.Cut(rest, " ")
		}
	}
	go func() {
		b, _ := io.ReadAll(r)
		c.mu.Lock()
		c.log.Write(b)
		c.mu.Unlock()
		c.done <- cmd.Wait()
	}()
	return c
}

// signal sends sig to the child, waits for it to exit and returns its
// exit status (cmd.Wait's error); log then holds all it wrote.
func (c *child) signal(t *testing.T, sig os.Signal) error {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := <-c.done
	c.done <- nil // for the cleanup
	return err
}

// startServe runs the binary's serve command on a free loopback port and
// waits until it listens.
func startServe(t *testing.T, bin string, args ...string) *child {
	t.Helper()
	return startChild(t, bin, "serve", args...)
}

// TestServe runs the real binary: a scripted redis-cli session, a SIGKILL
// under --fsync always, and a SIGTERM under --fsync no.
func TestServe(t *testing.T) {
	bin := buildBinary(t, t.TempDir())

	t.Run("redis-cli", func(t *testing.T) {
		cli, err := exec.LookPath("redis-cli")
		if err != nil {
			t.Skip("redis-cli not installed (Debian: redis-tools)")
		}
		s := startServe(t, bin, "--window", "1h", "--requirepass", "pw")
		_, port, _ := strings.Cut(s.addr, ":")
		script := strings.Join([]string{
			"PING",
			"AUTH pw",
			"PING",
			"SET order:1 x NX EX 600",
			"SET order:1 x NX EX 600",
			"SETNX order:2 x",
			"SETNX order:2 x",
			"EXISTS order:1 order:2 order:3",
			"SET order:3 x NX EX 7200",
			"SET order:3 x",
			"BF.RESERVE users 0.001 1000",
			"BF.MADD users a b a",
			"BF.EXISTS users b",
			"BF.EXISTS users z",
			"DEDUP.OBSERVE jobs j1 j1",
			"DEDUP.COMMIT jobs offset-9",
			"DEDUP.OBSERVE jobs j1",
			"DEDUP.CHECKPOINT jobs",
			"DBSIZE",
			"SELECT 1",
		}, "\n") + "\n"
		cmd := exec.Command(cli, "-p", port, "--no-auth-warning")
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli: %v\n%s", err, out)
		}
		lines := []string{
			"NOAUTH Authentication required.",
			"OK",
			"PONG",
			"OK",
			"",
			"1",
			"0",
			"2",
			"ERR EX 7200 is longer than the dedup window 1h0m0s: this server remembers a key for its window (--window), at least as long as any shorter EX",
			"ERR dedup serves SET key value NX [EX seconds|PX milliseconds] only: without NX a SET would overwrite, and a remembered key cannot be overwritten",
			"OK",
			"1", "1", "0",
			"1",
			"0",
			"new", "in-flight",
			"OK",
			"duplicate",
			"offset-9",
			"2",
			"ERR DB index is out of range: dedup serves database 0 only (use BF.* or DEDUP.* tables)",
		}
		// redis-cli prints a blank line after each error (on Redis too).
		var want strings.Builder
		for _, l := range lines {
			want.WriteString(l + "\n")
			if strings.HasPrefix(l, "ERR ") || strings.HasPrefix(l, "NOAUTH ") {
				want.WriteString("\n")
			}
		}
		if string(out) != want.String() {
			t.Errorf("redis-cli session:\n%q\nwant:\n%q", out, want.String())
		}
	})

	t.Run("kill9 fsync always", func(t *testing.T) {
		dir := t.TempDir()
		s := startServe(t, bin, "--state", dir, "--fsync", "always")
		const writers, batch, killAfter = 4, 20, 2000
		var (
			mu    sync.Mutex
			acked []string
			n     atomic.Int64
			wg    sync.WaitGroup
			stop  atomic.Bool
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, Protocol: 2})
				defer c.Close()
				for i := 0; !stop.Load(); i++ {
					pipe := c.Pipeline()
					keys := make([]string, batch)
					cmds := make([]*redis.BoolCmd, batch)
					for j := range keys {
						keys[j] = fmt.Sprintf("w%d-%d-%d", w, i, j)
						cmds[j] = pipe.SetNX(t.Context(), keys[j], 1, time.Minute)
					}
					_, _ = pipe.Exec(t.Context())
					mu.Lock()
					for j, cmd := range cmds {
						if ok, err := cmd.Result(); err == nil && ok {
							acked = append(acked, keys[j])
							n.Add(1)
						}
					}
					mu.Unlock()
				}
			}()
		}
		for n.Load() < killAfter {
			time.Sleep(time.Millisecond)
		}
		_ = s.signal(t, syscall.SIGKILL)
		stop.Store(true)
		wg.Wait()

		s = startServe(t, bin, "--state", dir, "--fsync", "always")
		c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 2})
		defer c.Close()
		pipe := c.Pipeline()
		cmds := make([]*redis.BoolCmd, len(acked))
		for i, k := range acked {
			cmds[i] = pipe.SetNX(t.Context(), k, 1, time.Minute)
		}
		if _, err := pipe.Exec(t.Context()); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		lost := 0
		for i, cmd := range cmds {
			if ok, err := cmd.Result(); err != nil || ok {
				if lost++; lost <= 3 {
					t.Errorf("%s was answered OK before SIGKILL and is new after (%v)", acked[i], err)
				}
			}
		}
		t.Logf("%d keys acknowledged before SIGKILL, %d lost", len(acked), lost)
	})

	t.Run("sigterm commits", func(t *testing.T) {
		dir := t.TempDir()
		// Under --fsync no nothing commits before the snapshot interval:
		// only the shutdown's commit can save the keys.
		s := startServe(t, bin, "--state", dir, "--fsync", "no", "--snapshot-interval", "1h", "--probabilistic")
		c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 2})
		for i := range 100 {
			if ok, err := c.SetNX(t.Context(), fmt.Sprint("k", i), 1, 0).Result(); err != nil || !ok {
				t.Fatalf("SETNX k%d = %v, %v", i, ok, err)
			}
		}
		c.Close()
		if err := s.signal(t, syscall.SIGTERM); err != nil {
			t.Fatalf("dedup serve after SIGTERM: %v\n%s", err, s.log)
		}
		s = startServe(t, bin, "--state", dir, "--fsync", "no")
		c = redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 2})
		defer c.Close()
		for i := range 100 {
			if ok, err := c.SetNX(t.Context(), fmt.Sprint("k", i), 1, 0).Result(); err != nil || ok {
				t.Fatalf("after SIGTERM and restart SETNX k%d = %v, %v; want false", i, ok, err)
			}
		}
		// The state's mode was adopted: the restart did not say --probabilistic.
		info, err := c.Info(t.Context(), "dedup").Result()
		if err != nil || !strings.Contains(info, "table_default:mode=probabilistic") {
			t.Errorf("INFO dedup after restart: %v\n%s", err, info)
		}
	})
}

// TestServeListenInUseLeavesNoState: `dedup serve` opened (and so
// created) its state directory before listening, so a port in use left a
// new empty state behind, after paying for opening a large one.
func TestServeListenInUseLeavesNoState(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	state := filepath.Join(t.TempDir(), "state")
	code, _, stderr := runCmd(t, "", "serve", "--listen", ln.Addr().String(), "--state", state)
	if code != 1 || !strings.Contains(stderr, "address already in use") || !strings.Contains(stderr, "--listen") {
		t.Errorf("port in use: exit %d, %q; want 1 and the listen error", code, stderr)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after failing to listen, %s: %v; want it absent", state, err)
	}
}

// TestServeListenNotLocal: an address of another host (here TEST-NET-1)
// failed with "serve: listen tcp ...: bind: cannot assign requested
// address", exit 1, naming no flag; it is a bad --listen value, as a
// malformed one is.
func TestServeListenNotLocal(t *testing.T) {
	for _, addr := range []string{"192.0.2.1:6380", "nonsense"} {
		state := filepath.Join(t.TempDir(), "state")
		code, _, stderr := runCmd(t, "", "serve", "--listen", addr, "--state", state)
		if code != 2 || !strings.Contains(stderr, `--listen "`+addr+`"`) {
			t.Errorf("--listen %s: exit %d, %q; want 2 naming the flag", addr, code, stderr)
		}
		if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after --listen %s, %s: %v; want it absent", addr, state, err)
		}
	}
}

// TestServeZeroLimitFlagsRefused: --max-clients 0 and --max-arg-size 0
// were silently replaced by the defaults (10000 clients, 1 MiB) since the
// server's config reads zero as "default"; a negative one was refused
// under the config field's name, not the flag's.
func TestServeZeroLimitFlagsRefused(t *testing.T) {
	for _, flag := range []string{"--max-clients", "--max-arg-size"} {
		for _, v := range []string{"0", "-1"} {
			// A server that starts anyway stops at once on this SIGTERM.
			sigs := make(chan os.Signal, 1)
			sigs <- syscall.SIGTERM
			var errb strings.Builder
			e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &errb, sigs: sigs}
			code, stderr := run(e, []string{"serve", "--listen", "127.0.0.1:0", flag, v}), errb.String()
			if code != 2 || !strings.Contains(stderr, flag+" must be at least 1, got "+v) {
				t.Errorf("%s %s: exit %d, %q; want a usage error naming the flag", flag, v, code, stderr)
			}
		}
	}
}

// serveInProcess runs `dedup serve args...` in this process on a free
// loopback port; stop sends it SIGTERM and returns its exit status and
// stderr.
func serveInProcess(t *testing.T, args ...string) (addr string, stop func() (int, string)) {
	t.Helper()
	return runInProcess(t, "serve", args...)
}

// runInProcess runs `dedup cmd --listen 127.0.0.1:0 args...` in this
// process and waits for its "listening on ADDR" line; stop sends it
// SIGTERM and returns its exit status and stderr.
func runInProcess(t *testing.T, cmd string, args ...string) (addr string, stop func() (int, string)) {
	t.Helper()
	pr, pw := io.Pipe()
	sigs := make(chan os.Signal, 1)
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: pw, sigs: sigs}
	code := make(chan int, 1)
	go func() {
		code <- run(e, append([]string{cmd, "--listen", "127.0.0.1:0"}, args...))
		pw.Close()
	}()
	var stderr strings.Builder
	r := bufio.NewReader(pr)
	for addr == "" {
		line, err := r.ReadString('\n')
		stderr.WriteString(line)
		if err != nil {
			t.Fatalf("dedup %s did not start: exit %d\n%s", cmd, <-code, stderr.String())
		}
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			addr, _, _ = strings.Cut(rest, " ")
		}
	}
	rest := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		rest <- string(b)
	}()
	stopped := false
	stop = func() (int, string) {
		stopped = true
		sigs <- syscall.SIGTERM
		c := <-code
		return c, stderr.String() + <-rest
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	return addr, stop
}

// TestServeMaxTablesFlag: the error of a table past the limit said
// "max-tables is 64", but no flag set it.
func TestServeMaxTablesFlag(t *testing.T) {
	addr, stop := serveInProcess(t, "--max-tables", "2")
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	if err := c.Do(t.Context(), "BF.ADD", "t1", "a").Err(); err != nil {
		t.Fatalf("BF.ADD to a second table: %v", err)
	}
	err := c.Do(t.Context(), "BF.ADD", "t2", "a").Err()
	if err == nil || !strings.Contains(err.Error(), "max-tables is 2") {
		t.Errorf("BF.ADD to a third table: %v, want max-tables is 2", err)
	}
	if code, stderr := stop(); code != 0 {
		t.Errorf("exit %d after SIGTERM\n%s", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "serve", "--max-tables", "0"); code != 2 || !strings.Contains(stderr, "--max-tables must be at least 1") {
		t.Errorf("--max-tables 0: exit %d, %s; want a usage error naming it", code, stderr)
	}
}

// TestServeRestartKeepsTableSizing: a restart without --rate and --fp
// rewrote the default table's options with the flags' defaults, so a
// table sized for 100000 keys/s at 0.1% came back sized for 10000 keys/s
// at 1%, ten times the false positives (dropped events, in probabilistic
// mode), while named tables kept theirs. Unset, they now come from the
// state; set, they retune it.
func TestServeRestartKeepsTableSizing(t *testing.T) {
	dir := t.TempDir()
	stats := func(args ...string) string {
		t.Helper()
		addr, stop := serveInProcess(t, append([]string{"--state", dir}, args...)...)
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		v, err := c.Do(t.Context(), "DEDUP.STATS", "default").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if code, stderr := stop(); code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		return fmt.Sprint(v)
	}
	want := "capacity 360000000 false_positive_rate 0.001"
	if got := stats("--rate", "100000", "--fp", "0.001"); !strings.Contains(got, want) {
		t.Fatalf("first run: %s, want %s", got, want)
	}
	if got := stats(); !strings.Contains(got, want) {
		t.Errorf("restart without --rate and --fp: %s, want %s", got, want)
	}
	if got := stats("--fp", "0.002"); !strings.Contains(got, "capacity 360000000 false_positive_rate 0.002") {
		t.Errorf("restart with --fp 0.002: %s", got)
	}
}
