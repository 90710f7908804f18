package bench

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestDedupProxyDeathIsExplained: a proxy that dies during the run is
// named in the error with its exit and the end of its stderr.
func TestDedupProxyDeathIsExplained(t *testing.T) {
	script := t.TempDir() + "/fakeproxy"
	// A "proxy" that announces an address nobody listens on, says why it
	// dies, and exits.
	body := "#!/bin/sh\necho 'dedup proxy: listening on 127.0.0.1:1 (fake)' >&2\necho 'panic: the reason' >&2\nexit 2\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := IdemConfig{Dir: t.TempDir()}
	cfg.EnsureDefaults()
	up := &upstream{url: "http://127.0.0.1:1"}
	tg, stop, err := startDedupProxy(context.Background(), cfg, script, up)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if tg.pool, err = newIdemPool(tg.url, 2); err != nil {
		t.Fatal(err)
	}
	defer tg.pool.close()
	var a idemAcc
	err = a.run(context.Background(), cfg, tg, up, nil, "x-")
	if err == nil || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "panic: the reason") ||
		!strings.Contains(err.Error(), "and 1 more clients failed") {
		t.Fatalf("error %v, want the exit status, the stderr and one error for both clients", err)
	}
}
