package resp_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// testMap splits the slots over addrs, per ranges to each node in turn.
func testMap(addrs []string, per int) *resp.SlotMap {
	n := len(addrs) * per
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d-%d %s\n", i*resp.Slots/n, (i+1)*resp.Slots/n-1, addrs[i/per])
	}
	m, err := resp.ParseSlotMap(strings.NewReader(b.String()))
	if err != nil {
		panic(err)
	}
	return m
}

// clusterNode is one in-process node of a test cluster.
type clusterNode struct {
	srv  *resp.Server
	addr string
	done chan error
}

// startCluster serves n nodes on loopback ports, each with cfg (Dir
// under dir/<i> when dir is set) and the same map of per ranges a node.
func startCluster(t testing.TB, n, per int, dir string, cfg resp.Options) []*clusterNode {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	m := testMap(addrs, per)
	nodes := make([]*clusterNode, n)
	for i := range nodes {
		c := cfg
		if dir != "" {
			c.Dir = filepath.Join(dir, fmt.Sprint(i))
		}
		cl := resp.ClusterOptions{Map: m, Announce: addrs[i]}
		if cfg.Cluster != nil {
			cl.Handover = cfg.Cluster.Handover
		}
		c.Cluster = &cl
		srv, err := resp.New(c)
		if err != nil {
			t.Fatal(err)
		}
		nd := &clusterNode{srv: srv, addr: addrs[i], done: make(chan error, 1)}
		go func() { nd.done <- srv.Serve(lns[i]) }()
		nodes[i] = nd
		t.Cleanup(func() {
			if err := srv.Shutdown(); err != nil {
				t.Error(err)
			}
			if err := <-nd.done; !errors.Is(err, resp.ErrServerClosed) {
				t.Errorf("Serve returned %v", err)
			}
		})
	}
	return nodes
}

func clusterClient(t *testing.T, addrs ...string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClusterEmulated: --cluster alone is one node owning every slot, and
// go-redis's ClusterClient works against it.
func TestClusterEmulated(t *testing.T) {
	_, addr := start(t, resp.Options{Cluster: &resp.ClusterOptions{}, Engine: dedup.Options{Window: time.Hour}})
	host, port, _ := net.SplitHostPort(addr)
	c := client(t, addr)
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 1 || slots[0].Start != 0 || slots[0].End != 16383 || slots[0].Nodes[0].Addr != net.JoinHostPort("127.0.0.1", port) || len(slots[0].Nodes[0].ID) != 40 {
		t.Fatalf("CLUSTER SLOTS %+v", slots)
	}
	id := c.ClusterMyID(ctx).Val()
	if id != slots[0].Nodes[0].ID {
		t.Fatalf("MYID %q, SLOTS says %q", id, slots[0].Nodes[0].ID)
	}
	info := c.ClusterInfo(ctx).Val()
	for _, want := range []string{"cluster_enabled:1", "cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:1", "cluster_size:1"} {
		if !strings.Contains(info, want) {
			t.Errorf("CLUSTER INFO lacks %q:\n%s", want, info)
		}
	}
	nodes := c.ClusterNodes(ctx).Val()
	if !strings.HasPrefix(nodes, id+" 127.0.0.1:"+port+"@") || !strings.Contains(nodes, "myself,master") || !strings.HasSuffix(nodes, " 0-16383\n") {
		t.Errorf("CLUSTER NODES %q", nodes)
	}
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil || len(shards) != 1 || !slices.Equal(slicesOf(shards[0].Slots), []int64{0, 16383}) || shards[0].Nodes[0].ID != id || shards[0].Nodes[0].Port != int64(mustAtoi(port)) {
		t.Fatalf("CLUSTER SHARDS %+v %v", shards, err)
	}
	if n := c.ClusterKeySlot(ctx, "123456789").Val(); n != 12739 {
		t.Errorf("KEYSLOT = %d", n)
	}
	if !strings.Contains(c.Info(ctx).Val(), "cluster_enabled:1") || !strings.Contains(c.Info(ctx, "server").Val(), "redis_mode:cluster") {
		t.Error("INFO does not say cluster")
	}
	_ = host
	cc := clusterClient(t, addr)
	if v := cc.SetNX(ctx, "k", 1, time.Minute).Val(); !v {
		t.Fatal("first SET NX not new")
	}
	if v := cc.SetNX(ctx, "k", 1, time.Minute).Val(); v {
		t.Fatal("second SET NX new")
	}
	if v, err := cc.BFAdd(ctx, "{t}f", "x").Result(); !v {
		t.Fatal("BF.ADD not new", err)
	}
}

func slicesOf(rs []redis.SlotRange) []int64 {
	var out []int64
	for _, r := range rs {
		out = append(out, r.Start, r.End)
	}
	return out
}

func mustAtoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// TestClusterCommandKeys: COMMAND gives every command with keys its
// first and last key and a key spec, BF.* and DEDUP.* included, as go-redis
// parses them.
func TestClusterCommandKeys(t *testing.T) {
	_, addr := start(t, resp.Options{Cluster: &resp.ClusterOptions{}})
	info, err := client(t, addr).Command(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][3]int8{
		"set": {1, 1, 1}, "setnx": {1, 1, 1}, "exists": {1, -1, 1}, "bf.add": {1, 1, 1}, "bf.madd": {1, 1, 1},
		"bf.insert": {1, 1, 1}, "bf.reserve": {1, 1, 1}, "dedup.observe": {1, 1, 1}, "dedup.begin": {1, 1, 1},
		"dedup.stats": {1, 1, 1}, "ping": {0, 0, 0}, "cluster": {0, 0, 0},
	} {
		ci := info[name]
		if ci == nil {
			t.Errorf("COMMAND lacks %s", name)
			continue
		}
		if got := [3]int8{ci.FirstKeyPos, ci.LastKeyPos, ci.StepCount}; got != want {
			t.Errorf("%s keys %v, want %v", name, got, want)
		}
	}
	// The raw key spec of BF.ADD: begin_search index 1, find_keys range.
	v, err := client(t, addr).Do(ctx, "COMMAND", "INFO", "bf.add").Slice()
	if err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprint(v[0].([]any)[8])
	for _, want := range []string{"begin_search", "index 1", "find_keys", "range", "lastkey 0", "keystep 1"} {
		if !strings.Contains(spec, want) {
			t.Errorf("BF.ADD key specs %s lack %q", spec, want)
		}
	}
}

// TestClusterThreeNodes: go-redis's ClusterClient over three nodes
// answers SET NX EX as one node does, every key is served by the node
// owning its slot (the others answer -MOVED to it), multi-key commands
// across slots are -CROSSSLOT, and BF.* tables route by their name.
func TestClusterThreeNodes(t *testing.T) {
	cfg := resp.Options{Fsync: resp.FsyncNo, Engine: dedup.Options{Window: time.Hour}}
	nodes := startCluster(t, 3, 1, "", cfg)
	_, single := start(t, cfg)
	one := client(t, single)
	cc := clusterClient(t, nodes[0].addr)

	const n = 3000
	distinct := map[string]bool{}
	for i := range n {
		k := fmt.Sprintf("order:%d", (i*7919)%2000) // about a third repeat
		distinct[k] = true
		want, err1 := one.SetNX(ctx, k, 1, time.Minute).Result()
		got, err2 := cc.SetNX(ctx, k, 1, time.Minute).Result()
		if err1 != nil || err2 != nil || got != want {
			t.Fatalf("SET %s NX EX: cluster %v %v, one node %v %v", k, got, err2, want, err1)
		}
	}
	// Each key lives on the node owning its slot; the others redirect.
	var plain []*redis.Client
	for _, nd := range nodes {
		plain = append(plain, client(t, nd.addr))
	}
	m := testMap([]string{nodes[0].addr, nodes[1].addr, nodes[2].addr}, 1)
	total := int64(0)
	for i, c := range plain {
		total += c.DBSize(ctx).Val()
		for k := range distinct {
			if len(distinct) > 300 && k[len(k)-1] != '7' {
				continue // a sample
			}
			slot := resp.KeySlot([]byte(k))
			owner := m.Ranges[slot*3/resp.Slots].Node
			got, err := c.Exists(ctx, k).Result()
			if nodes[i].addr == owner {
				if err != nil || got != 1 {
					t.Fatalf("owner %s: EXISTS %s = %v %v", owner, k, got, err)
				}
			} else if err == nil || err.Error() != fmt.Sprintf("MOVED %d %s", slot, owner) {
				t.Fatalf("node %s: EXISTS %s = %v %v, want MOVED %d %s", nodes[i].addr, k, got, err, slot, owner)
			}
		}
	}
	if total != int64(len(distinct)) {
		t.Fatalf("DBSIZE over the nodes %d, want %d distinct keys", total, len(distinct))
	}
	// Keys of one slot (a hash tag) go together; of two slots, not.
	if err := plain[0].Exists(ctx, "a", "b").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		t.Fatalf("EXISTS a b = %v, want CROSSSLOT", err)
	}
	tagged := cc.Exists(ctx, "{user1}:a", "{user1}:b")
	if tagged.Err() != nil || tagged.Val() != 0 {
		t.Fatalf("EXISTS of one hash tag: %v", tagged)
	}
	// A BF.* table lives on the node of its name's slot.
	for _, name := range []string{"hot", "{p0}events", "{p1}events"} {
		if v, err := cc.BFAdd(ctx, name, "x").Result(); !v || err != nil {
			t.Fatalf("BF.ADD %s: %v %v", name, v, err)
		}
		if v := cc.BFAdd(ctx, name, "x").Val(); v {
			t.Fatalf("BF.ADD %s x twice: new", name)
		}
		slot := resp.KeySlot([]byte(name))
		owner := m.Ranges[slot*3/resp.Slots].Node
		for i, c := range plain {
			err := c.BFExists(ctx, name, "x").Err()
			if (nodes[i].addr == owner) != (err == nil) {
				t.Fatalf("BF.EXISTS %s on %s: %v (owner %s)", name, nodes[i].addr, err, owner)
			}
		}
	}
	if err := cc.BFAdd(ctx, "default", "x").Err(); err == nil || !strings.Contains(err.Error(), "spread over the cluster") {
		t.Fatalf("BF.ADD default: %v", err)
	}
	// A transaction of one slot.
	cmds, err := cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, "{tx}1", 1, time.Minute)
		p.SetNX(ctx, "{tx}1", 1, time.Minute)
		return nil
	})
	if err != nil || !cmds[0].(*redis.BoolCmd).Val() || cmds[1].(*redis.BoolCmd).Val() {
		t.Fatalf("MULTI: %v %v", cmds, err)
	}
}

// TestClusterMoveUnderLoad moves a slot range between two nodes while
// clients mark keys of it: every key's first SET NX is answered new and
// every repeat seen, before, during and after the move, and the range's
// keys are answered by the new owner afterwards (its history moved).
func TestClusterMoveUnderLoad(t *testing.T) {
	dir := t.TempDir()
	cfg := resp.Options{Engine: dedup.Options{Window: time.Hour},
		Cluster: &resp.ClusterOptions{Handover: "file://" + filepath.Join(dir, "handover")}}
	if err := os.MkdirAll(filepath.Join(dir, "handover"), 0o700); err != nil {
		t.Fatal(err)
	}
	nodes := startCluster(t, 3, 2, dir, cfg)
	// Range 0-2729 is node 0's first: move it to node 1.
	m := testMap([]string{nodes[0].addr, nodes[1].addr, nodes[2].addr}, 2)
	r := m.Ranges[0]
	before := client(t, nodes[0].addr)
	var inRange []string
	for i := 0; len(inRange) < 400; i++ {
		if k := fmt.Sprintf("pre:%d", i); resp.KeySlot([]byte(k)) <= r.End {
			inRange = append(inRange, k)
			if v := before.SetNX(ctx, k, 1, 0).Val(); !v {
				t.Fatalf("%s not new", k)
			}
		}
	}
	const workers, perWorker = 4, 1500
	errs := make(chan error, workers)
	moved := make(chan struct{})
	for w := range workers {
		go func() {
			cc := clusterClient(t, nodes[2].addr)
			for i := range perWorker {
				k := fmt.Sprintf("w%d:%d", w, i)
				if v, err := cc.SetNX(ctx, k, 1, time.Minute).Result(); err != nil || !v {
					errs <- fmt.Errorf("first SET NX %s = %v %v: a first sighting refused", k, v, err)
					return
				}
				if i > 0 {
					p := fmt.Sprintf("w%d:%d", w, i-1)
					if v, err := cc.SetNX(ctx, p, 1, time.Minute).Result(); err != nil || v {
						errs <- fmt.Errorf("repeat SET NX %s = %v %v: a duplicate passed", p, v, err)
						return
					}
				}
				if i == perWorker/3 && w == 0 {
					close(moved)
				}
			}
			errs <- nil
		}()
	}
	<-moved
	if err := before.Do(ctx, "DEDUP.CLUSTER", "MOVE", r.Start, r.End, nodes[1].addr).Err(); err != nil {
		t.Fatal(err)
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Every key marked, before, during or after the move, is seen.
	cc := clusterClient(t, nodes[0].addr)
	for w := range workers {
		for i := range perWorker {
			k := fmt.Sprintf("w%d:%d", w, i)
			if v, err := cc.SetNX(ctx, k, 1, time.Minute).Result(); err != nil || v {
				t.Fatalf("after the move, SET NX %s = %v %v: a duplicate passed", k, v, err)
			}
		}
	}
	// The keys marked before the move are seen at the new owner; the old
	// one redirects there.
	after := client(t, nodes[1].addr)
	for _, k := range inRange {
		if v, err := after.SetNX(ctx, k, 1, 0).Result(); err != nil || v {
			t.Fatalf("after the move, %s = %v %v at the new owner, want seen", k, v, err)
		}
	}
	slot := resp.KeySlot([]byte(inRange[0]))
	if err := before.Exists(ctx, inRange[0]).Err(); err == nil || err.Error() != fmt.Sprintf("MOVED %d %s", slot, nodes[1].addr) {
		t.Fatalf("old owner: %v", err)
	}
	// Every node's map says so (the third node was told).
	for _, nd := range nodes {
		slots := client(t, nd.addr).ClusterSlots(ctx).Val()
		if slots[0].Start != r.Start || slots[0].Nodes[0].Addr != nodes[1].addr {
			t.Fatalf("%s: CLUSTER SLOTS %+v", nd.addr, slots[0])
		}
	}
}

const pyClusterScript = `
import sys
from redis.cluster import RedisCluster, ClusterNode
host, port = sys.argv[1].rsplit(":", 1)
r = RedisCluster(startup_nodes=[ClusterNode(host, int(port))])
print("nodes", len(r.get_primaries()))
new = sum(1 for i in range(600) if r.set("k:%d" % (i % 400), 1, nx=True, ex=60))
print("set", new)
print("setnx", r.setnx("s", 1), r.setnx("s", 1))
print("bf.add", r.execute_command("BF.ADD", "{p1}f", "a"), r.execute_command("BF.ADD", "{p1}f", "a"))
print("observe", r.execute_command("DEDUP.OBSERVE", "{p2}t", "x", "x"))
print("keyslot", r.keyslot("123456789"))
print("dbsize", sum(r.dbsize(target_nodes=RedisCluster.ALL_NODES).values()) if isinstance(r.dbsize(target_nodes=RedisCluster.ALL_NODES), dict) else r.dbsize(target_nodes=RedisCluster.ALL_NODES))
`

// TestClusterRedisPy: redis-py's RedisCluster finds the three nodes from
// one and routes SET NX, BF.* and DEDUP.* by the key specs of COMMAND.
func TestClusterRedisPy(t *testing.T) {
	py := ""
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "from redis.cluster import RedisCluster").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("redis-py with RedisCluster not installed (Debian: python3-redis)")
	}
	nodes := startCluster(t, 3, 1, "", resp.Options{Fsync: resp.FsyncNo, Engine: dedup.Options{Window: time.Hour}})
	script := filepath.Join(t.TempDir(), "cluster.py")
	if err := os.WriteFile(script, []byte(pyClusterScript), 0o644); err != nil {
		t.Fatal(err)
	}
	checkLines(t, runClient(t, py, nil, script, nodes[1].addr), []string{
		"nodes 3",
		"set 400",
		"setnx True False",
		"bf.add 1 0",
		"observe [b'new', b'in-flight']",
		"keyslot 12739",
		"dbsize 401",
	})
}

// clusterChildEnv carries a cluster node child's state dir, map file and
// address.
const clusterChildEnv = "DEDUP_RESP_CLUSTER_CHILD"

// TestClusterNodeChild is the body of a cluster node run as a child
// process by TestClusterKillNode.
func TestClusterNodeChild(t *testing.T) {
	v := os.Getenv(clusterChildEnv)
	if v == "" {
		t.Skip("runs as a child of TestClusterKillNode")
	}
	f := strings.Split(v, "|")
	m, err := resp.ReadSlotMap(f[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	srv, err := resp.New(resp.Options{Dir: f[0], Fsync: resp.FsyncAlways, Engine: dedup.Options{Window: time.Hour},
		Cluster: &resp.ClusterOptions{Map: m, Announce: f[2]}})
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

// TestClusterKillNode: three nodes as child processes under --fsync
// always; one is killed with SIGKILL. Clients of the other nodes' slots
// are served on unaffected, and once the killed node restarts every key
// it acknowledged is seen.
func TestClusterKillNode(t *testing.T) {
	dir := t.TempDir()
	addrs := make([]string, 3)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	mapFile := filepath.Join(dir, "map")
	if err := os.WriteFile(mapFile, []byte(testMap(addrs, 1).String()), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(i int) *exec.Cmd {
		cmd, _ := startServerChild(t, "TestClusterNodeChild",
			clusterChildEnv+"="+filepath.Join(dir, fmt.Sprint(i))+"|"+mapFile+"|"+addrs[i])
		return cmd
	}
	children := []*exec.Cmd{run(0), run(1), run(2)}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout,
		Protocol: 2, MaxRedirects: 1, DialTimeout: time.Second})
	defer cc.Close()
	owner := func(k string) int { return resp.KeySlot([]byte(k)) * 3 / resp.Slots }
	var keys []string
	for i := range 600 {
		k := fmt.Sprintf("ev:%d", i)
		keys = append(keys, k)
		if v, err := cc.SetNX(ctx, k, 1, time.Minute).Result(); err != nil || !v {
			t.Fatalf("SET NX %s = %v %v", k, v, err)
		}
	}
	if err := children[2].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = children[2].Wait()
	for i := range 600 {
		k := fmt.Sprintf("ev:%d", i)
		if owner(k) == 2 {
			continue
		}
		if v, err := cc.SetNX(ctx, k, 1, time.Minute).Result(); err != nil || v {
			t.Fatalf("with node 2 killed, repeat SET NX %s = %v %v", k, v, err)
		}
		fresh := "late:" + k
		if owner(fresh) == 2 {
			continue
		}
		if v, err := cc.SetNX(ctx, fresh, 1, time.Minute).Result(); err != nil || !v {
			t.Fatalf("with node 2 killed, first SET NX %s = %v %v", fresh, v, err)
		}
	}
	run(2)
	seen := 0
	for _, k := range keys {
		if owner(k) != 2 {
			continue
		}
		var v bool
		var err error
		for range 50 { // until the client reconnects to the restarted node
			if v, err = cc.SetNX(ctx, k, 1, time.Minute).Result(); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || v {
			t.Fatalf("after the restart, SET NX %s = %v %v: an acknowledged key was lost", k, v, err)
		}
		seen++
	}
	if seen < 100 {
		t.Fatalf("only %d keys on the killed node", seen)
	}
}
