package resp_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// BenchmarkClusterSetNX: SET NX EX of new keys through go-redis's
// ClusterClient, pipelines of 64 from parallel clients, against one
// emulated dedup node, three dedup nodes, and a three-node Redis Cluster
// of redis-server (skipped without it), side by side in one run:
//
//	go test ./resp -run '^$' -bench ClusterSetNX -benchtime 200000x
//
// The dedup nodes run in this process (and share its cores with the
// client); the redis-server nodes are child processes.
func BenchmarkClusterSetNX(b *testing.B) {
	cfg := resp.Options{Fsync: resp.FsyncEverySec, Engine: dedup.Options{Window: time.Hour, ExpectedRate: 1e5}}
	targets := []struct {
		name  string
		addrs func(b *testing.B) []string
	}{
		{"dedup-1", func(b *testing.B) []string {
			_, addr := start(b, resp.Options{Cluster: &resp.ClusterOptions{}, Fsync: cfg.Fsync, Engine: cfg.Engine})
			return []string{addr}
		}},
		{"dedup-3", func(b *testing.B) []string {
			var out []string
			for _, n := range startCluster(b, 3, 1, "", cfg) {
				out = append(out, n.addr)
			}
			return out
		}},
		{"redis-3", redisCluster},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			addrs := tg.addrs(b)
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Protocol: 2, ReadTimeout: time.Minute})
			defer cc.Close()
			var next atomic.Int64
			run := fmt.Sprint(time.Now().UnixNano())
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for {
					p := cc.Pipeline()
					n := 0
					for ; n < 64 && pb.Next(); n++ {
						p.SetNX(ctx, run+":"+fmt.Sprint(next.Add(1)), 1, time.Minute)
					}
					if n == 0 {
						return
					}
					if _, err := p.Exec(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// redisCluster starts three redis-server nodes with cluster-enabled yes
// and joins them with redis-cli --cluster create.
func redisCluster(b *testing.B) []string {
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("redis-server not installed")
	}
	dir := b.TempDir()
	var addrs []string
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, port, _ := net.SplitHostPort(addr)
		nd := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(nd, 0o700); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nd, "nodes.conf"), "--dir", nd, "--save", "", "--appendonly", "yes", "--appendfsync", "everysec")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs = append(addrs, addr)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for c.Ping(ctx).Err() != nil {
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer c.Close()
	for !strings.Contains(c.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the other nodes learn the slots
	return addrs
}
