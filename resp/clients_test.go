package resp_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// Clients from other languages, run as child processes against a server:
// redis-py (Debian's python3-redis), node-redis 6 (npm "redis", RESP3 by
// default, and with RESP: 2) and ioredis. Each prints one line per check;
// the test compares them. A missing client skips its case. The npm
// packages are looked for under $DEDUP_NODE_MODULES, else
// $HOME/.cache/dedup-ci-node/node_modules (where .ci/run installs them).

// runClient runs a script and returns its output lines.
func runClient(t *testing.T, prog string, env []string, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func checkLines(t *testing.T, got []string, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// startForClients serves with a password and --fsync no, so that no
// background commit turns a key in flight into a duplicate mid-script.
func startForClients(t *testing.T) string {
	_, addr := start(t, resp.Options{RequirePass: "pw", Fsync: resp.FsyncNo, Engine: dedup.Options{Window: time.Hour}})
	return addr
}

const pyScript = `
import sys, redis
host, port = sys.argv[1].rsplit(":", 1)
r = redis.Redis(host=host, port=int(port), password="pw")
print("set", r.set("o:1", 1, nx=True, ex=3600), r.set("o:1", 1, nx=True, ex=3600))
print("setnx", r.setnx("o:2", 1), r.setnx("o:2", 1))
p = r.pipeline()
for i in range(1000):
    p.set("p:%d" % i, 1, nx=True, ex=60)
print("pipeline", sum(1 for v in p.execute() if v))
print("bf.add", r.bf().add("t", "a"), r.bf().add("t", "a"))
print("bf.madd", r.bf().madd("t", "a", "b"))
print("bf.insert", r.bf().insert("t2", ["x", "y", "x"], capacity=1000, error=0.001))
print("bf.card", r.execute_command("BF.CARD", "t2"))
print("bf.exists", r.bf().exists("t2", "x"), r.bf().exists("t2", "z"))
i = r.bf().info("t2")
print("bf.info", i.capacity, i.insertedNum)
print("config", sorted(r.config_get("*").keys())[:3])
print("observe", r.execute_command("DEDUP.OBSERVE", "t", "a", "c"))
`

// TestClientRedisPy: redis-py (RESP2) with its bf() helpers, pipelines and
// CONFIG GET *.
func TestClientRedisPy(t *testing.T) {
	// The first python3 that has redis-py: the one on PATH, or the
	// system's, where Debian's python3-redis installs.
	py := ""
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import redis").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("redis-py not installed (Debian: python3-redis)")
	}
	addr := startForClients(t)
	script := filepath.Join(t.TempDir(), "client.py")
	if err := os.WriteFile(script, []byte(pyScript), 0o644); err != nil {
		t.Fatal(err)
	}
	checkLines(t, runClient(t, py, nil, script, addr), []string{
		"set True None",
		"setnx True False",
		"pipeline 1000",
		"bf.add 1 0",
		"bf.madd [0, 1]",
		"bf.insert [1, 1, 0]",
		"bf.card 2",
		"bf.exists 1 0",
		"bf.info 1000 2",
		"config ['appendfsync', 'appendonly', 'databases']",
		"observe [b'in-flight', b'new']",
	})
}

// nodeModules returns the directory holding the npm packages, or "".
func nodeModules() string {
	for _, d := range []string{os.Getenv("DEDUP_NODE_MODULES"), filepath.Join(os.Getenv("HOME"), ".cache", "dedup-ci-node", "node_modules")} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "redis")); err == nil {
			return d
		}
	}
	return ""
}

const nodeRedisScript = `
const { createClient } = require('redis');
const [addr, resp] = process.argv.slice(2);
(async () => {
  const opts = { url: 'redis://:pw@' + addr, socket: { reconnectStrategy: false, connectTimeout: 10000 } };
  if (resp) opts.RESP = Number(resp);
  const c = createClient(opts);
  c.on('error', e => { console.log('error', e.message); process.exit(1); });
  await c.connect();
  const p = 'r' + (resp || 'default') + ':';
  console.log('set', await c.set(p + 'k', '1', { NX: true, EX: 3600 }), await c.set(p + 'k', '1', { NX: true, EX: 3600 }));
  console.log('setnx', await c.setNX(p + 'j', '1'), await c.setNX(p + 'j', '1'));
  console.log('bf.add', await c.bf.add(p + 't', 'a'), await c.bf.add(p + 't', 'a'));
  console.log('bf.madd', JSON.stringify(await c.bf.mAdd(p + 't', ['a', 'b'])));
  console.log('bf.card', await c.bf.card(p + 't'));
  const info = await c.bf.info(p + 't');
  console.log('bf.info', info['Number of items inserted'] ?? info.numberOfItemsInserted);
  const m = c.multi();
  m.set(p + 'm', '1', { NX: true }); m.exists(p + 'm');
  console.log('multi', JSON.stringify(await m.exec()));
  console.log('observe', JSON.stringify(await c.sendCommand(['DEDUP.OBSERVE', p + 't', 'a', 'c'])));
  await c.quit();
})().catch(e => { console.log('error', e.message); process.exit(1); });
`

const ioredisScript = `
const Redis = require('ioredis');
const [addr] = process.argv.slice(2);
const [host, port] = addr.split(':');
(async () => {
  const c = new Redis({ host, port: Number(port), password: 'pw', maxRetriesPerRequest: 0, retryStrategy: () => null });
  console.log('set', await c.set('io:k', '1', 'EX', 3600, 'NX'), await c.set('io:k', '1', 'EX', 3600, 'NX'));
  console.log('setnx', await c.setnx('io:j', '1'), await c.setnx('io:j', '1'));
  console.log('bf.madd', JSON.stringify(await c.call('BF.MADD', 'io:t', 'a', 'b', 'a')));
  const p = c.pipeline();
  for (let i = 0; i < 1000; i++) p.set('io:p:' + i, '1', 'EX', 60, 'NX');
  console.log('pipeline', (await p.exec()).filter(([e, v]) => !e && v === 'OK').length);
  console.log('observe', JSON.stringify(await c.call('DEDUP.OBSERVE', 'io:t', 'a', 'c')));
  c.disconnect();
})().catch(e => { console.log('error', e.message); process.exit(1); });
`

// TestClientNode: node-redis 6 in its default RESP3 and in RESP2, and
// ioredis.
func TestClientNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	mods := nodeModules()
	if mods == "" {
		t.Skip("npm packages redis and ioredis not installed (see .ci/run; or set DEDUP_NODE_MODULES)")
	}
	addr := startForClients(t)
	dir := t.TempDir()
	env := []string{"NODE_PATH=" + mods}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nr := write("node-redis.js", nodeRedisScript)
	// node-redis answers the same in both protocols: it maps RESP2's
	// integers to the booleans RESP3 sends.
	nodeRedisWant := []string{
		"set OK null",
		"setnx 1 0",
		"bf.add true false",
		"bf.madd [false,true]",
		"bf.card 2",
		"bf.info 2",
		`multi ["OK",1]`,
		`observe ["in-flight","new"]`,
	}
	t.Run("node-redis RESP3 default", func(t *testing.T) {
		checkLines(t, runClient(t, node, env, nr, addr), nodeRedisWant)
	})
	t.Run("node-redis RESP2", func(t *testing.T) {
		checkLines(t, runClient(t, node, env, nr, addr, "2"), nodeRedisWant)
	})
	if _, err := os.Stat(filepath.Join(mods, "ioredis")); err != nil {
		t.Skip("npm package ioredis not installed")
	}
	io := write("ioredis.js", ioredisScript)
	t.Run("ioredis", func(t *testing.T) {
		checkLines(t, runClient(t, node, env, io, addr), []string{
			"set OK null",
			"setnx 1 0",
			"bf.madd [1,1,0]",
			"pipeline 1000",
			`observe ["in-flight","new"]`,
		})
	})
}
