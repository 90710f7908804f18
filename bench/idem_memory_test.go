package bench

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// addrWriter hands on the address a target says it listens on.
type addrWriter chan string

func (a addrWriter) Write(p []byte) (int, error) {
	if _, rest, ok := strings.Cut(string(p), "listening on "); ok {
		a <- strings.TrimSpace(rest)
	}
	return len(p), nil
}

// testUpstream starts the benchmark's upstream with the default
// configuration, stopped at the test's end.
func testUpstream(t *testing.T) (IdemConfig, *upstream) {
	t.Helper()
	cfg := IdemConfig{}
	cfg.EnsureDefaults()
	up, err := startUpstream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.close)
	return cfg, up
}

// serveOwn runs serve in the background and returns its URL.
func serveOwn(t *testing.T, serve func(ctx context.Context, stderr io.Writer) error) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(addrWriter, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, addr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		t.Fatalf("target ended before it listened: %v", err)
	}
	return ""
}

func postCharge(t *testing.T, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestIdemMemoryMiddleware: the in-memory middleware runs a key once,
// replays it with the upstream's status, headers and body, and refuses
// the key with another body.
func TestIdemMemoryMiddleware(t *testing.T) {
	_, up := testUpstream(t)
	url := serveOwn(t, func(ctx context.Context, stderr io.Writer) error {
		return ServeIdemMemory(ctx, "127.0.0.1:0", up.url, stderr)
	})
	st, h, body := postCharge(t, url, "k1", "a")
	if st != http.StatusCreated || h.Get("Idempotent-Replayed") != "" || !strings.Contains(body, `"id":"k1"`) {
		t.Fatalf("first: %d %v %q", st, h, body)
	}
	st2, h2, body2 := postCharge(t, url, "k1", "a")
	if st2 != st || h2.Get("Idempotent-Replayed") != "true" || body2 != body || h2.Get("Location") != "/charges/k1" {
		t.Fatalf("repeat: %d %v %q, want the first answer replayed", st2, h2, body2)
	}
	if st, _, _ := postCharge(t, url, "k1", "b"); st != http.StatusUnprocessableEntity {
		t.Fatalf("other body: %d, want 422", st)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times, want 1", n)
	}
}

// TestMemKVExpires: a lock or a result leaves the map at its TTL.
func TestMemKVExpires(t *testing.T) {
	kv := newMemKV()
	ctx := context.Background()
	if ok, _ := kv.SetNX(ctx, "k", []byte("lock"), time.Millisecond); !ok {
		t.Fatal("first SetNX refused")
	}
	if ok, _ := kv.SetNX(ctx, "k", []byte("lock"), time.Hour); ok {
		t.Fatal("SetNX of a held key stored")
	}
	time.Sleep(5 * time.Millisecond)
	if v, _ := kv.Get(ctx, "k"); v != nil {
		t.Fatalf("expired key read %q", v)
	}
	if ok, _ := kv.SetNX(ctx, "k", []byte("lock"), time.Hour); !ok {
		t.Fatal("SetNX of an expired key refused")
	}
}

// TestIdemConstant: the constant target answers every request as a
// replay of the upstream's answer to its key.
func TestIdemConstant(t *testing.T) {
	cfg, up := testUpstream(t)
	url := serveOwn(t, func(ctx context.Context, stderr io.Writer) error {
		return ServeIdemConstant(ctx, "127.0.0.1:0", cfg.BodySize, stderr)
	})
	_, _, want := postCharge(t, up.url, "k9", "a")
	st, h, body := postCharge(t, url, "k9", "a")
	if st != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" || h.Get("Location") != "/charges/k9" || body != want {
		t.Fatalf("%d %v %q, want 201, replayed, the upstream's %q", st, h, body, want)
	}
}
