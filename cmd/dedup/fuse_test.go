package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/resp"
)

// TestFuseFlagErrors: the errors of --filter fuse named the library's
// options ("fuse needs a Dir", "Filter fuse at FalsePositiveRate 1e-09"),
// which a user of the command never sees; they name the flags now, with
// exit status 2.
func TestFuseFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		notWant []string
	}{
		{[]string{"--filter", "fuse"}, []string{"--filter", "--state DIR"}, []string{"Dir", "Filter fuse"}},
		{[]string{"--filter", "fuse", "--probabilistic"}, []string{"--filter", "--state DIR"}, []string{"Dir"}},
		{[]string{"--filter", "fuse", "--state", "STATE", "--fp", "1e-9"}, []string{"--generations", "--filter fuse", "--fp 1e-09"}, []string{"FalsePositiveRate", "Filter fuse"}},
	} {
		args := append([]string{"filter", "--key", "id"}, tc.args...)
		for i, a := range args {
			if a == "STATE" {
				args[i] = t.TempDir() + "/state"
			}
		}
		code, stdout, stderr := runCmd(t, `{"id":1}`+"\n", args...)
		if code != exitBad || stdout != "" {
			t.Errorf("%v: exit %d (out %q), want %d: %s", tc.args, code, stdout, exitBad, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: %q does not name %s", tc.args, stderr, w)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(stderr, w) {
				t.Errorf("%v: %q names the library's %s", tc.args, stderr, w)
			}
		}
	}
}

// TestServeFuse: `dedup serve --state DIR --filter fuse` refused to start
// ("Filter fuse needs a Dir", exit 2) although DIR was given: the server's
// engine options were checked before a table had its folder. Without
// --state the refusal names the flags.
func TestServeFuse(t *testing.T) {
	if code, _, stderr := runCmd(t, "", "serve", "--listen", "127.0.0.1:0", "--filter", "fuse"); code != exitBad ||
		!strings.Contains(stderr, "--filter") || !strings.Contains(stderr, "--state DIR") {
		t.Errorf("serve --filter fuse without --state: exit %d, %q; want %d naming --filter and --state DIR", code, stderr, exitBad)
	}
	dir := t.TempDir()
	addr, stop := serveInProcess(t, "--state", dir, "--filter", "fuse")
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	for i, want := range []bool{true, false} {
		ok, err := c.SetNX(t.Context(), "order:42", 1, 0).Result()
		if err != nil || ok != want {
			t.Fatalf("SET NX %d: %v, %v; want %v", i, ok, err, want)
		}
	}
	if err := c.Do(t.Context(), "BF.RESERVE", "t", "0.01", "1000").Err(); err != nil {
		t.Fatalf("BF.RESERVE of a fuse table: %v", err)
	}
	if v, err := c.Do(t.Context(), "BF.ADD", "t", "a").Int(); err != nil || v != 1 {
		t.Fatalf("BF.ADD: %v, %v", v, err)
	}
	if code, stderr := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := runCmd(t, "", "stats", resp.EngineDir(dir, resp.DefaultTable)); code != 0 || !strings.Contains(stdout, "fuse filter") {
		t.Errorf("stats of the default table: exit %d, %s%s", code, stdout, stderr)
	}
	// dedup stats checks the flags it is given against the state.
	if code, _, stderr := runCmd(t, "", "stats", "--filter", "fuse", resp.EngineDir(dir, resp.DefaultTable)); code != 0 {
		t.Errorf("stats --filter fuse of a fuse state: exit %d, %s", code, stderr)
	}
}
