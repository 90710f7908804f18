package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/resp"
)

// ClusterRow is one cluster target's SET NX run: throughput through a
// go-redis ClusterClient and the real memory of its processes.
type ClusterRow struct {
	Target    string  `json:"target"`
	Nodes     int     `json:"nodes"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Keys is how many SET NX were answered OK: the keys the target holds.
	Keys uint64 `json:"keys"`
	// RSS is the sum, over the target's processes, of their resident
	// set's growth over the run (VmRSS of /proc/PID/status).
	RSS            uint64  `json:"rss"`
	RSSBytesPerKey float64 `json:"rss_bytes_per_key"`
}

// ServeClusterResult is the outcome of [ServeCluster].
type ServeClusterResult struct {
	Config  ServeConfig  `json:"config"`
	Rows    []ClusterRow `json:"cluster"`
	Machine *Machine     `json:"machine,omitempty"`
}

// ServeCluster compares, side by side in one run, one `dedup serve
// --cluster` node, cfg.ClusterNodes dedup nodes over a slot map, and a
// Redis Cluster of cfg.ClusterNodes redis-server nodes (cluster-enabled
// yes, joined by redis-cli --cluster create), each node a child process:
// cfg.Clients go-redis ClusterClient workers send cfg.Requests SET key 1 NX
// EX ttl of distinct keys in pipelines of cfg.Pipeline. The Redis row is
// left out without redis-server or redis-cli, and under 3 nodes (a Redis
// Cluster needs 3 masters).
func ServeCluster(ctx context.Context, cfg ServeConfig, p Progress) (*ServeClusterResult, error) {
	cfg.EnsureDefaults()
	if cfg.ClusterNodes < 2 {
		return nil, fmt.Errorf("bench: serve cluster: %d nodes: want at least 2", cfg.ClusterNodes)
	}
	bin := cfg.DedupBin
	if bin == "" {
		dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-bin-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "dedup")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/streamdedup/dedup/cmd/dedup").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("bench: go build dedup: %v\n%s", err, out)
		}
	}
	res := &ServeClusterResult{Config: cfg, Machine: StartMachine()}
	defer res.Machine.End()
	type target struct {
		name  string
		nodes int
		start func() (*procCluster, error)
	}
	n := cfg.ClusterNodes
	targets := []target{
		{"dedup serve, 1 node", 1, func() (*procCluster, error) { return startDedupCluster(ctx, cfg, bin, 1) }},
		{fmt.Sprintf("dedup serve, %d nodes", n), n, func() (*procCluster, error) { return startDedupCluster(ctx, cfg, bin, n) }},
	}
	_, errS := exec.LookPath("redis-server")
	_, errC := exec.LookPath("redis-cli")
	// redis-cli --cluster create wants at least 3 masters.
	if errS == nil && errC == nil && n >= 3 {
		targets = append(targets, target{fmt.Sprintf("redis-server %d-node cluster", n), n,
			func() (*procCluster, error) { return startRedisCluster(ctx, cfg, n) }})
	}
	if p != nil {
		p.Stage("serve: cluster runs", int64(len(targets)*cfg.Rounds))
	}
	for _, tg := range targets {
		var rows []ClusterRow
		for range cfg.Rounds {
			pc, err := tg.start()
			if err != nil {
				return nil, err
			}
			row, err := clusterRun(ctx, cfg, pc)
			err = errors.Join(err, pc.stop())
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", tg.name, err)
			}
			row.Target, row.Nodes = tg.name, tg.nodes
			rows = append(rows, row)
			if p != nil {
				p.Add(1)
			}
		}
		// The median round by ops/s.
		sortRows(rows)
		res.Rows = append(res.Rows, rows[len(rows)/2])
	}
	return res, nil
}

func sortRows(rows []ClusterRow) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && rows[j].OpsPerSec < rows[j-1].OpsPerSec; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

// procCluster is a target's node processes.
type procCluster struct {
	addrs []string
	cmds  []*exec.Cmd
	dir   string
}

func (pc *procCluster) stop() error {
	for _, c := range pc.cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	return os.RemoveAll(pc.dir)
}

// rss sums the nodes' resident sets.
func (pc *procCluster) rss() (uint64, error) {
	var sum uint64
	for _, c := range pc.cmds {
		r, err := procRSS(c.Process.Pid)
		if err != nil {
			return 0, err
		}
		sum += r
	}
	return sum, nil
}

// freePorts returns n free loopback addresses.
func freePorts(n int) ([]string, error) {
	var out []string
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench: find a free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// waitPing waits until every address answers PING.
func waitPing(ctx context.Context, addrs []string) error {
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		for {
			err := c.Ping(ctx).Err()
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				c.Close()
				return fmt.Errorf("bench: %s did not answer: %w", a, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
	return nil
}

// startDedupCluster runs n `dedup serve` children: alone with --cluster,
// or over a slot map of one range a node, each sized for its share of
// the run's keys.
func startDedupCluster(ctx context.Context, cfg ServeConfig, bin string, n int) (*procCluster, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-cluster-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	pc := &procCluster{dir: dir}
	addrs, err := freePorts(n)
	if err != nil {
		return nil, errors.Join(err, pc.stop())
	}
	pc.addrs = addrs
	mapFile := filepath.Join(dir, "cluster.map")
	var b strings.Builder
	for i, a := range addrs {
		fmt.Fprintf(&b, "%d-%d %s\n", i*resp.Slots/n, (i+1)*resp.Slots/n-1, a)
	}
	if err := os.WriteFile(mapFile, []byte(b.String()), 0o600); err != nil {
		return nil, errors.Join(err, pc.stop())
	}
	rate := math.Ceil(float64(min(cfg.Requests, cfg.KeySpace)) / float64(n) / float64(cfg.TTL))
	for i, a := range addrs {
		args := []string{"serve", "--listen", a, "--state", filepath.Join(dir, strconv.Itoa(i)), "--fsync", cfg.Fsync,
			"--window", (time.Duration(cfg.TTL) * time.Second).String(), "--rate", strconv.FormatFloat(rate, 'f', 0, 64),
			"--fp", strconv.FormatFloat(cfg.FalsePositiveRate, 'g', -1, 64)}
		if n == 1 {
			args = append(args, "--cluster")
		} else {
			args = append(args, "--cluster-map", mapFile, "--cluster-announce", a)
		}
		cmd := exec.CommandContext(ctx, bin, args...)
		if err := cmd.Start(); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: start dedup serve: %w", err), pc.stop())
		}
		pc.cmds = append(pc.cmds, cmd)
	}
	if err := waitPing(ctx, addrs); err != nil {
		return nil, errors.Join(err, pc.stop())
	}
	return pc, nil
}

// startRedisCluster runs n redis-server children with cluster-enabled
// yes, without persistence as the other Redis rows of `dedupbench serve`,
// and joins them with redis-cli --cluster create.
func startRedisCluster(ctx context.Context, cfg ServeConfig, n int) (*procCluster, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-rediscluster-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	pc := &procCluster{dir: dir}
	addrs, err := freePorts(n)
	if err != nil {
		return nil, errors.Join(err, pc.stop())
	}
	pc.addrs = addrs
	for i, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		nd := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(nd, 0o700); err != nil {
			return nil, errors.Join(err, pc.stop())
		}
		cmd := exec.CommandContext(ctx, "redis-server", "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nd, "nodes.conf"), "--dir", nd, "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--loglevel", "warning")
		if err := cmd.Start(); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: start redis-server: %w", err), pc.stop())
		}
		pc.cmds = append(pc.cmds, cmd)
	}
	if err := waitPing(ctx, addrs); err != nil {
		return nil, errors.Join(err, pc.stop())
	}
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench: redis-cli --cluster create: %w\n%s", err, out), pc.stop())
	}
	// Every node knows every slot's owner before the run.
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				return nil, errors.Join(fmt.Errorf("bench: redis cluster node %s not ok: %s", a, info), pc.stop())
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return pc, nil
}

// clusterRun sends the run's SET NX through a ClusterClient and measures
// throughput and the processes' RSS growth per key held.
func clusterRun(ctx context.Context, cfg ServeConfig, pc *procCluster) (ClusterRow, error) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: pc.addrs, Protocol: 2, ReadTimeout: time.Minute,
		PoolSize: cfg.Clients})
	defer cc.Close()
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		return ClusterRow{}, err
	}
	purge := func() {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Do(ctx, "MEMORY", "PURGE").Err() })
	}
	purge()
	base, err := pc.rss()
	if err != nil {
		return ClusterRow{}, err
	}
	ttl := time.Duration(cfg.TTL) * time.Second
	var next, held atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Clients)
	t0 := time.Now()
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p := cc.Pipeline()
				var cmds []*redis.BoolCmd
				for range cfg.Pipeline {
					i := next.Add(1) - 1
					if i >= int64(cfg.Requests) {
						break
					}
					cmds = append(cmds, p.SetNX(ctx, "key:"+strconv.FormatInt(i%int64(cfg.KeySpace), 10), 1, ttl))
				}
				if len(cmds) == 0 {
					return
				}
				if _, err := p.Exec(ctx); err != nil {
					errs <- err
					return
				}
				for _, c := range cmds {
					if c.Val() {
						held.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(errs)
	if err := <-errs; err != nil {
		return ClusterRow{}, err
	}
	// Let everysec commit what is in flight, then let every node return
	// freed pages (jemalloc's purge, a collection and scavenge on dedup).
	time.Sleep(1500 * time.Millisecond)
	purge()
	after, err := pc.rss()
	if err != nil {
		return ClusterRow{}, err
	}
	row := ClusterRow{OpsPerSec: float64(cfg.Requests) / elapsed.Seconds(), Keys: uint64(held.Load()), RSS: max(after, base) - base}
	if row.Keys > 0 {
		row.RSSBytesPerKey = float64(row.RSS) / float64(row.Keys)
	}
	return row, nil
}

// WriteText writes the cluster rows with ratios to the first row (one
// dedup node).
func (r *ServeClusterResult) WriteText(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "SET key 1 NX EX %d through a go-redis ClusterClient: %d requests, %d workers, pipelines of %d, fsync %s (dedup)\n",
		c.TTL, c.Requests, c.Clients, c.Pipeline, c.Fsync)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tnodes\tops/s\tx 1 node\tkeys\tRSS B/key\tx 1 node\t")
	if len(r.Rows) == 0 {
		return tw.Flush()
	}
	ref := r.Rows[0]
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%d\t%.1f\t%s\t\n", row.Target, row.Nodes, row.OpsPerSec, ratio(row.OpsPerSec, ref.OpsPerSec),
			row.Keys, row.RSSBytesPerKey, ratio(row.RSSBytesPerKey, ref.RSSBytesPerKey))
	}
	return tw.Flush()
}
