package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/idempotency"
	"github.com/streamdedup/dedup/resp"
)

// respServer is a real `dedup serve` (package resp) in this process, on
// a state directory, that can be stopped and started again on its
// address.
type respServer struct {
	t    *testing.T
	dir  string
	addr string
	srv  *resp.Server
	done chan error
}

func startRESP(t *testing.T, dir, addr string) *respServer {
	t.Helper()
	srv, err := resp.New(resp.Options{Dir: dir, Fsync: resp.FsyncNo})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for i := 0; ; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond) // the old listener's port
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &respServer{t: t, dir: dir, addr: ln.Addr().String(), srv: srv, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ln) }()
	t.Cleanup(s.stop)
	return s
}

func (s *respServer) stop() {
	if s.srv == nil {
		return
	}
	if err := s.srv.Shutdown(); err != nil {
		s.t.Error(err)
	}
	<-s.done
	s.srv = nil
}

// replica is one process's middleware on the shared server.
func replica(t *testing.T, addr string, lease time.Duration, h http.Handler) *httptest.Server {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return serve(t, idempotency.Options{Store: idempotency.NewRESPStore(c, "idem"), Lease: lease, ErrorLog: t.Logf}, h)
}

// TestRESPStoreSharesOneState: three middleware replicas on one dedup
// serve: one run per key whatever replica each request reaches, 409 at
// every replica while it runs, the replay and the 422 at replicas that
// never saw the key, 503 and nothing run while the server is down, and
// the replays again once it is back on its state.
func TestRESPStoreSharesOneState(t *testing.T) {
	srv := startRESP(t, t.TempDir(), "127.0.0.1:0")
	var runs atomic.Int32
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if r.URL.Path == "/hold" {
			<-hold
		}
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", n)
	})
	reps := []*httptest.Server{replica(t, srv.addr, 5*time.Second, h), replica(t, srv.addr, 5*time.Second, h), replica(t, srv.addr, 5*time.Second, h)}

	// Concurrent requests of one key, spread over the replicas.
	first := make(chan response, 1)
	go func() { first <- do(t, reps[0], "POST", "/hold", "k1", "a") }()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := do(t, reps[i%3], "POST", "/hold", "k1", "a"); r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
				t.Errorf("replica %d while k1 runs: %+v", i%3, r)
			}
		}()
	}
	wg.Wait()
	close(hold)
	f := <-first
	if f.status != 201 || runs.Load() != 1 {
		t.Fatalf("first: %+v, %d runs", f, runs.Load())
	}
	for i, rep := range reps {
		r := do(t, rep, "POST", "/hold", "k1", "a")
		if r.body != f.body || r.header.Get("Location") != f.header.Get("Location") || r.header.Get(idempotency.ReplayedHeader) != "true" {
			t.Fatalf("replica %d replay: %+v", i, r)
		}
		if r := do(t, rep, "POST", "/hold", "k1", "another body"); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("replica %d, the key with another body: %+v", i, r)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs", runs.Load())
	}

	// The server down: 503 at every replica, nothing runs.
	srv.stop()
	for i, rep := range reps {
		if r := do(t, rep, "POST", "/", fmt.Sprintf("new-%d", i), ""); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("replica %d, store down: %+v", i, r)
		}
		if r := do(t, rep, "POST", "/hold", "k1", "a"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("replica %d, a completed key with the store down: %+v", i, r)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs with the store down", runs.Load())
	}
	// Back on its state and address: the replays, and new keys run.
	startRESP(t, srv.dir, srv.addr)
	for i, rep := range reps {
		var r response
		for try := 0; try < 50; try++ {
			if r = do(t, rep, "POST", "/hold", "k1", "a"); r.status != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r.body != f.body || r.header.Get(idempotency.ReplayedHeader) != "true" {
			t.Fatalf("replica %d after the restart: %+v", i, r)
		}
	}
	if r := do(t, reps[1], "POST", "/", "k2", ""); r.status != 201 || runs.Load() != 2 {
		t.Fatalf("a new key after the restart: %+v, %d runs", r, runs.Load())
	}
}

// TestRESPStoreErrors: the server's codes come back as the engine's
// errors; an unreachable server is ErrStoreUnreachable.
func TestRESPStoreErrors(t *testing.T) {
	srv := startRESP(t, t.TempDir(), "127.0.0.1:0")
	c := redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1})
	defer c.Close()
	s := idempotency.NewRESPStore(c, "t")
	ctx := context.Background()
	cl, err := s.Begin(ctx, []byte("k"), []byte("f"), time.Minute)
	if err != nil || cl.State != dedup.ClaimNew {
		t.Fatalf("Begin = %+v, %v", cl, err)
	}
	if err := s.Renew(ctx, []byte("k"), cl.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, []byte("k"), dedup.Token{1}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("Release with another token: %v", err)
	}
	if _, err := s.Begin(ctx, []byte("k2"), nil, 1000*time.Hour); !errors.Is(err, dedup.ErrBadLease) {
		t.Fatalf("Begin with a lease over the window: %v", err)
	}
	if _, err := s.Begin(ctx, []byte(strings.Repeat("k", 5000)), nil, time.Second); !errors.Is(err, dedup.ErrKeyTooLarge) {
		t.Fatalf("Begin of a 5000-byte key: %v", err)
	}
	if err := s.Complete(ctx, []byte("k"), cl.Token, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Begin(ctx, []byte("k"), []byte("f"), time.Minute); err != nil || c.State != dedup.ClaimCompleted || string(c.Result) != "r" {
		t.Fatalf("Begin of a completed key = %+v, %v", c, err)
	}
	srv.stop()
	if _, err := s.Begin(ctx, []byte("k"), nil, time.Second); !errors.Is(err, idempotency.ErrStoreUnreachable) {
		t.Fatalf("Begin with the server down: %v", err)
	}
}
