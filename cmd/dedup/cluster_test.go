package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestServeClusterFlags: a bad map is a usage error naming its line, the
// handover store needs a map, and --cluster answers CLUSTER SLOTS as the
// owner of every slot at 127.0.0.1 and the listening port.
func TestServeClusterFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "map")
	if err := os.WriteFile(bad, []byte("0-100 127.0.0.1:7001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-map", bad}, "slots 101-16383 are not owned"},
		{[]string{"--cluster", "--cluster-handover", "file:///tmp"}, "--cluster-handover needs --cluster-map"},
		{[]string{"--cluster-announce", "127.0.0.1:1"}, "need --cluster or --cluster-map"},
	} {
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		var errb strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &errb, sigs: sigs}
		code := run(e, append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args...))
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want a usage error naming %q", tc.args, code, errb.String(), tc.want)
		}
	}
	addr, stop := serveInProcess(t, "--cluster")
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	slots, err := c.ClusterSlots(t.Context()).Result()
	if err != nil || len(slots) != 1 || slots[0].Nodes[0].Addr != addr || slots[0].End != 16383 {
		t.Errorf("CLUSTER SLOTS %+v %v, want one range 0-16383 at %s", slots, err, addr)
	}
	if code, stderr := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}
