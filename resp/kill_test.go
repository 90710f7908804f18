package resp_test

import (
	"fmt"
	"os"
	"os/exec"
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
const childEnv = "DEDUP_RESP_KILL_CHILD_DIR"

// startChild runs this test binary as a server of FsyncAlways on dir.
func startChild(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	return startServerChild(t, "TestKillAlways", childEnv+"="+dir)
}

// TestKillAlways: under FsyncAlways, a server killed with SIGKILL in the
// middle of concurrent pipelined writes forgets no key it answered new.
func TestKillAlways(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		serveInChild(resp.Options{Dir: dir, Fsync: resp.FsyncAlways})
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
			c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, MaxRetries: -1, Protocol: 2})
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
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, Protocol: 2})
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

// TestKillDoneAlways: under FsyncAlways a DEDUP.DONE reply means its keys
// are durable. A server killed with SIGKILL right after the replies, with
// no commit asked for, remembers every key Done and none of the keys
// observed but never Done.
func TestKillDoneAlways(t *testing.T) {
	dir := t.TempDir()
	cmd, addr := startChild(t, dir)
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, MaxRetries: -1, Protocol: 2})
	if err := c.Do(t.Context(), "DEDUP.RESERVE", "w", "EXPLICITDONE").Err(); err != nil {
		t.Fatal(err)
	}
	const n = 200
	keys := make([]any, 0, n+2)
	keys = append(keys, "DEDUP.OBSERVE", "w")
	for i := range n {
		keys = append(keys, fmt.Sprint("k", i))
	}
	if err := c.Do(t.Context(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
	// Workers finish the even keys, one DONE each, from 4 connections.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wc := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, MaxRetries: -1, Protocol: 2})
			defer wc.Close()
			for i := 2 * w; i < n; i += 8 {
				if got, err := wc.Do(t.Context(), "DEDUP.DONE", "w", fmt.Sprint("k", i)).Result(); err != nil || got != int64(1) {
					t.Errorf("DEDUP.DONE w k%d = %v, %v", i, got, err)
				}
			}
		}()
	}
	wg.Wait()
	c.Close()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	_, addr = startChild(t, dir)
	c = redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, Protocol: 2})
	defer c.Close()
	got, err := c.Do(t.Context(), keys...).StringSlice()
	if err != nil || len(got) != n {
		t.Fatalf("after restart DEDUP.OBSERVE = %v, %v", got, err)
	}
	for i, v := range got {
		want := "new"
		if i%2 == 0 {
			want = "duplicate"
		}
		if v != want {
			t.Errorf("after SIGKILL k%d is %s, want %s", i, v, want)
		}
	}
}
