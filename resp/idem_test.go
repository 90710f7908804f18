package resp_test

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/resp"
)

// TestIdempotencyCommands: DEDUP.BEGIN, COMPLETE, RELEASE and GET through
// go-redis, across a restart, and through redis-cli.
func TestIdempotencyCommands(t *testing.T) {
	dir := t.TempDir()
	cfg := resp.Options{Dir: dir, Fsync: resp.FsyncNo}
	srv, ln := listen(t, cfg)
	go srv.Serve(ln)
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, Protocol: 2, MaxRetries: -1})
	do := func(args ...any) []any {
		t.Helper()
		v, err := c.Do(ctx, args...).Slice()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	first := do("DEDUP.BEGIN", "orders", "k1", "fp-a", 60000)
	if len(first) != 3 || first[0] != "new" || len(first[1].(string)) != 32 || first[2].(int64) <= 0 {
		t.Fatalf("first BEGIN = %v", first)
	}
	tok := first[1].(string)
	if v := do("DEDUP.BEGIN", "orders", "k1", "fp-a", 60000); v[0] != "inprogress" || v[1].(int64) <= 0 || v[1].(int64) > 60000 {
		t.Fatalf("second BEGIN = %v", v)
	}
	if v := do("DEDUP.BEGIN", "orders", "k1", "fp-b", 60000); fmt.Sprint(v) != "[mismatch]" {
		t.Fatalf("BEGIN with another fingerprint = %v", v)
	}
	if err := c.Do(ctx, "DEDUP.BEGIN", "orders", "k9", "fp", int64(1e12)).Err(); err == nil || !strings.Contains(err.Error(), "longer than the window") {
		t.Fatalf("BEGIN with a lease over the window: %v, want an error naming the window", err)
	}
	if v := do("DEDUP.GET", "orders", "k2"); fmt.Sprint(v) != "[absent]" {
		t.Fatalf("GET of an unknown key = %v", v)
	}
	if v := do("DEDUP.GET", "missing-table", "k2"); fmt.Sprint(v) != "[absent]" {
		t.Fatalf("GET on a missing table = %v", v)
	}
	// A claim in progress survives a restart; its token still completes it.
	c.Close()
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	_, addr := start(t, cfg)
	c = client(t, addr)
	if v := do("DEDUP.GET", "orders", "k1", "fp-a"); v[0] != "inprogress" {
		t.Fatalf("GET after the restart = %v", v)
	}
	if err := c.Do(ctx, "DEDUP.COMPLETE", "orders", "k1", tok, "charge ch_1").Err(); err != nil {
		t.Fatal(err)
	}
	if v := do("DEDUP.BEGIN", "orders", "k1", "fp-a", 60000); v[0] != "completed" || v[1] != "charge ch_1" {
		t.Fatalf("BEGIN after COMPLETE = %v", v)
	}
	err := c.Do(ctx, "DEDUP.RELEASE", "orders", "k1", tok).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "LEASELOST") {
		t.Fatalf("RELEASE after COMPLETE: %v, want LEASELOST", err)
	}
	// Release: the key runs again.
	v := do("DEDUP.BEGIN", "orders", "k3", "", 60000)
	if err := c.Do(ctx, "DEDUP.RELEASE", "orders", "k3", v[1]).Err(); err != nil {
		t.Fatal(err)
	}
	if v := do("DEDUP.BEGIN", "orders", "k3", "", 60000); v[0] != "new" {
		t.Fatalf("BEGIN after RELEASE = %v", v)
	}
	for _, bad := range [][]any{
		{"DEDUP.BEGIN", "orders", "k", "fp", 0},
		{"DEDUP.BEGIN", "orders", "k", "fp", "soon"},
		{"DEDUP.COMPLETE", "orders", "k", "not-a-token", "r"},
		{"DEDUP.BEGIN", "orders", "", "fp", 1000},
		{"DEDUP.COMPLETE", "no-such-table", "k", tok, "r"},
	} {
		if err := c.Do(ctx, bad...).Err(); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}

	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Log("redis-cli not installed: not checked")
		return
	}
	host, port, _ := net.SplitHostPort(addr)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := cli("DEDUP.BEGIN", "orders", "cli-1", "body-hash", "30000")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "new" {
		t.Fatalf("redis-cli DEDUP.BEGIN:\n%s", out)
	}
	if out := cli("DEDUP.COMPLETE", "orders", "cli-1", lines[1], `{"id":7}`); strings.TrimSpace(out) != "OK" {
		t.Fatalf("redis-cli DEDUP.COMPLETE: %s", out)
	}
	if out := cli("DEDUP.GET", "orders", "cli-1", "body-hash"); !strings.HasPrefix(out, "completed\n{\"id\":7}\n") {
		t.Fatalf("redis-cli DEDUP.GET:\n%s", out)
	}
}
