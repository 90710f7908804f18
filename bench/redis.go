package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server child process on a loopback port, without
// persistence.
type RedisServer struct {
	cmd  *exec.Cmd
	Addr string
	dir  string
}

// StartRedis starts redis-server on a free loopback port, with extra
// configuration arguments after its own (later ones win: "--appendonly",
// "yes" turns persistence on). It returns ErrNoRedis when the binary is not
// on PATH.
func StartRedis(ctx context.Context, extra ...string) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedis
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: find a free port for redis: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "dedupbench-redis-")
	if err != nil {
		return nil, fmt.Errorf("bench: redis dir: %w", err)
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning"}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: start redis-server: %w", err)
	}
	s := &RedisServer{cmd: cmd, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("bench: redis-server did not answer on %s: %w", s.Addr, err), s.Stop())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the server's process id.
func (s *RedisServer) Pid() int { return s.cmd.Process.Pid }

// Stop kills the server (the harness's own child) and removes its
// directory.
func (s *RedisServer) Stop() error {
	var err error
	if s.cmd.Process != nil {
		if kerr := s.cmd.Process.Kill(); kerr != nil && !errors.Is(kerr, os.ErrProcessDone) {
			err = fmt.Errorf("bench: stop redis-server: %w", kerr)
		}
		_ = s.cmd.Wait()
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// RedisTarget runs `SET key 1 NX PX window` for every event, pipelined one
// batch per round trip. Redis expires keys on its own, real clock.
type RedisTarget struct {
	c       *redis.Client
	window  time.Duration
	baseMem uint64
}

// OpenRedisTarget connects to addr, flushes the database and records the
// memory baseline.
func OpenRedisTarget(ctx context.Context, addr string, window time.Duration) (*RedisTarget, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	if err := c.FlushAll(ctx).Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("bench: redis flushall: %w", err), c.Close())
	}
	t := &RedisTarget{c: c, window: window}
	m, err := t.usedMemory(ctx)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	t.baseMem = m
	return t, nil
}

// Name returns "redis SET NX EX".
func (t *RedisTarget) Name() string { return "redis SET NX EX" }

// Check pipelines one SET NX per key; a key already set is a duplicate.
func (t *RedisTarget) Check(keys [][]byte, _ time.Time, dup []bool) error {
	ctx := context.Background()
	pipe := t.c.Pipeline()
	cmds := make([]*redis.BoolCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.SetNX(ctx, string(k), 1, t.window)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("bench: redis pipeline: %w", err)
	}
	for i, c := range cmds {
		ok, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("bench: redis SET NX: %w", err)
		}
		dup[i] = !ok
	}
	return nil
}

func (t *RedisTarget) usedMemory(ctx context.Context) (uint64, error) {
	info, err := t.c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: redis info memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: redis used_memory %q: %w", v, err)
			}
			return n, nil
		}
	}
	return 0, errors.New("bench: redis INFO memory has no used_memory")
}

// Usage reports DBSIZE and the growth of used_memory since Open.
func (t *RedisTarget) Usage() (Usage, error) {
	ctx := context.Background()
	n, err := t.c.DBSize(ctx).Result()
	if err != nil {
		return Usage{}, fmt.Errorf("bench: redis dbsize: %w", err)
	}
	m, err := t.usedMemory(ctx)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Keys: uint64(n), RAM: max(m, t.baseMem) - t.baseMem}, nil
}

// Close closes the client.
func (t *RedisTarget) Close() error {
	if err := t.c.Close(); err != nil {
		return fmt.Errorf("bench: close redis client: %w", err)
	}
	return nil
}
