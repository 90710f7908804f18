package resp_test

import (
	"fmt"
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
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// moveChildEnv carries a move child's state dir, map file, address,
// handover URL and the step of a move at which it kills itself ("" for
// none).
const moveChildEnv = "DEDUP_RESP_MOVE_CHILD"

// TestClusterMoveChild is the body of a cluster node run as a child
// process by TestClusterMoveCrash.
func TestClusterMoveChild(t *testing.T) {
	v := os.Getenv(moveChildEnv)
	if v == "" {
		t.Skip("runs as a child of TestClusterMoveCrash")
	}
	f := strings.Split(v, "|")
	if f[4] != "" {
		resp.SetMoveHook(func(step string) {
			if step == f[4] {
				// Let clients be served in this step, then die.
				time.Sleep(300 * time.Millisecond)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		})
	}
	m, err := resp.ReadSlotMap(f[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	srv, err := resp.New(resp.Options{Dir: f[0], Fsync: resp.FsyncAlways, Engine: dedup.Options{Window: time.Hour},
		Cluster: &resp.ClusterOptions{Map: m, Announce: f[2], Handover: f[3]}})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", f[2])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("addr", ln.Addr())
	_ = srv.Serve(ln)
	os.Exit(0)
}

// TestClusterMoveCrash: a slot range moves from node 0 to node 1, two
// child processes under --fsync always, while a cluster client sends
// first sightings and repeats of the range; one node is killed with
// SIGKILL at a step of the move and restarted. The move completes, no
// duplicate passes, no first sighting is answered seen, and every key
// acknowledged is seen after it.
func TestClusterMoveCrash(t *testing.T) {
	for _, c := range []struct {
		step   string
		victim int
	}{
		{"migrating", 0}, // the source, before the export
		{"exported", 0},  // the source, after the export, before the target installs
		{"installed", 1}, // the target, after installing, before it owns the range
		{"finished", 0},  // the source, after the target owns it, before the hand-off
	} {
		t.Run(c.step, func(t *testing.T) { testMoveCrash(t, c.step, c.victim) })
	}
}

func testMoveCrash(t *testing.T, step string, victim int) {
	dir := t.TempDir()
	addrs := make([]string, 2)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	mapFile := filepath.Join(dir, "map")
	if err := os.WriteFile(mapFile, []byte(fmt.Sprintf("0-8191 %s\n8192-16383 %s\n", addrs[0], addrs[1])), 0o600); err != nil {
		t.Fatal(err)
	}
	ho := filepath.Join(dir, "handover")
	if err := os.MkdirAll(ho, 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(i int, crash string) *exec.Cmd {
		cmd, _ := startServerChild(t, "TestClusterMoveChild", moveChildEnv+"="+strings.Join(
			[]string{filepath.Join(dir, fmt.Sprint(i)), mapFile, addrs[i], "file://" + ho, crash}, "|"))
		return cmd
	}
	crash := func(i int) string {
		if i == victim {
			return step
		}
		return ""
	}
	children := []*exec.Cmd{run(0, crash(0)), run(1, crash(1))}
	newClient := func() *redis.ClusterClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout,
			Protocol: 2, DialTimeout: time.Second, MaxRetries: -1})
	}
	cc := newClient()
	defer cc.Close()
	// Keys of the moving range 0-8191 only.
	key := func(prefix string, i int) string {
		for j := 0; ; j++ {
			if k := fmt.Sprintf("%s:%d:%d", prefix, i, j); resp.KeySlot([]byte(k)) < 8192 {
				return k
			}
		}
	}
	var mu sync.Mutex
	var acked []string
	for i := range 200 {
		k := key("pre", i)
		if v, err := cc.SetNX(ctx, k, 1, time.Hour).Result(); err != nil || !v {
			t.Fatalf("SET NX %s = %v %v", k, v, err)
		}
		acked = append(acked, k)
	}
	// setNX sends SET NX until it is answered; unsure says an earlier
	// try failed (it may have been marked).
	setNX := func(k string) (v, unsure bool) {
		for {
			v, err := cc.SetNX(ctx, k, 1, time.Hour).Result()
			if err == nil {
				return v, unsure
			}
			unsure = true
			time.Sleep(10 * time.Millisecond)
		}
	}
	var stop atomic.Bool
	var dupPassed, refused, ambiguous atomic.Int64
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := 0; !stop.Load(); i++ {
			k := key("ev", i)
			v, unsure := setNX(k)
			switch {
			case v:
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			case unsure:
				ambiguous.Add(1)
			default:
				refused.Add(1)
				t.Errorf("first SET NX %s answered seen", k)
			}
			mu.Lock()
			old := acked[i*7%len(acked)]
			mu.Unlock()
			if v, _ := setNX(old); v {
				dupPassed.Add(1)
				t.Errorf("repeat SET NX %s answered new: a duplicate passed", old)
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	src := redis.NewClient(&redis.Options{Addr: addrs[0], Protocol: 2, ReadTimeout: time.Minute})
	defer src.Close()
	moveErr := make(chan error, 1)
	go func() { moveErr <- src.Do(ctx, "DEDUP.CLUSTER", "MOVE", 0, 8191, addrs[1]).Err() }()
	if err := children[victim].Wait(); err == nil {
		t.Fatalf("node %d exited cleanly, want killed at %s", victim, step)
	}
	time.Sleep(100 * time.Millisecond)
	children[victim] = run(victim, "")
	// Both nodes' maps say the range is node 1's once the move is over.
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		for {
			m, err := c.Do(ctx, "DEDUP.CLUSTER", "MAP").Text()
			if err == nil && strings.Contains(m, "0-8191 "+addrs[1]) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the move did not complete: map %q, %v", a, m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	<-loadDone
	<-moveErr // fails when the source was killed, or ran on in the background
	mu.Lock()
	defer mu.Unlock()
	for _, k := range acked {
		if v, _ := setNX(k); v {
			t.Fatalf("after the move, SET NX %s answered new: an acknowledged key was lost", k)
		}
	}
	t.Logf("%s: %d keys acknowledged, %d duplicates passed, %d first sightings refused, %d unsure (a try failed)",
		step, len(acked), dupPassed.Load(), refused.Load(), ambiguous.Load())
	if len(acked) < 300 {
		t.Fatalf("only %d keys acknowledged", len(acked))
	}
}
