package bench

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestIdemPoolReadsEveryResponseShape drives the load generator's client
// against net/http answering with a Content-Length, chunked (flushed) with
// trailers, after a 100 Continue, and closing the connection: every response
// is read whole and the next request on the connection still parses.
func TestIdemPoolReadsEveryResponseShape(t *testing.T) {
	var n, conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/charges" || r.Header.Get("Idempotency-Key") == "" {
			t.Errorf("request %s %s key %q", r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"))
		}
		body := new(bytes.Buffer)
		if _, err := body.ReadFrom(r.Body); err != nil || !strings.Contains(body.String(), "amount") {
			t.Errorf("body %q, %v", body, err)
		}
		switch n.Add(1) % 4 {
		case 0:
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(strings.Repeat("x", 300)))
		case 1:
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(http.StatusCreated)
			for i := 0; i < 3; i++ {
				w.Write([]byte(strings.Repeat("y", 5000)))
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "15000")
		case 2:
			w.WriteHeader(http.StatusContinue)
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("{}"))
		case 3:
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("bye"))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	pool, err := newIdemPool(srv.URL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.close()
	var h Histogram
	if _, err := idemLoad(context.Background(), pool, "k-", 40, func(i int) int { return i }, nil, false, &h); err != nil {
		t.Fatal(err)
	}
	if h.Count() != 40 || n.Load() != 40 {
		t.Fatalf("%d latencies, %d requests served, want 40", h.Count(), n.Load())
	}
	// One connection per client, and one more after every close.
	if c := conns.Load(); c < 10 || c > 12 {
		t.Errorf("%d connections for 40 requests of which 10 closed theirs", c)
	}
	// A response not marked replayed fails a replay run.
	if _, err := idemLoad(context.Background(), pool, "k-", 8, func(i int) int { return i }, nil, true, &h); err == nil || !strings.Contains(err.Error(), "replayed false") {
		t.Errorf("replay run over unmarked responses: %v", err)
	}
}

func TestIdemPoolRejectsBadURL(t *testing.T) {
	for _, u := range []string{"https://x:1", "localhost:80", "http://"} {
		if _, err := newIdemPool(u, 1); err == nil {
			t.Errorf("newIdemPool(%q) = nil error", u)
		}
	}
}
