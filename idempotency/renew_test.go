package idempotency_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamdedup/dedup/idempotency"
)

// TestSlowRequestRunsOnce: a request slower than the lease keeps its
// key: the middleware renews the claim while the handler runs, so a
// repeat gets 409, not a second run, on the engine and over RESP.
func TestSlowRequestRunsOnce(t *testing.T) {
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(900 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	})
	const lease = 300 * time.Millisecond
	srv := startRESP(t, t.TempDir(), "127.0.0.1:0")
	for name, s := range map[string]func() (a, b string){
		"engine": func() (string, string) {
			x := serve(t, idempotency.Options{Lease: lease}, h)
			return x.URL, x.URL
		},
		"resp": func() (string, string) {
			return replica(t, srv.addr, lease, h).URL, replica(t, srv.addr, lease, h).URL
		},
	} {
		t.Run(name, func(t *testing.T) {
			runs.Store(0)
			a, b := s()
			first := make(chan response, 1)
			go func() { first <- send(t, http.DefaultClient, "POST", a, "slow", nil) }()
			for _, at := range []time.Duration{400 * time.Millisecond, 700 * time.Millisecond} {
				time.Sleep(at - 300*time.Millisecond)
				if r := send(t, http.DefaultClient, "POST", b, "slow", nil); r.status != http.StatusConflict {
					t.Fatalf("a repeat %v into a request slower than the lease: %+v", at, r)
				}
			}
			if r := <-first; r.status != 201 || runs.Load() != 1 {
				t.Fatalf("first: %+v, %d runs", r, runs.Load())
			}
			if r := send(t, http.DefaultClient, "POST", b, "slow", nil); r.status != 201 || r.header.Get(idempotency.ReplayedHeader) != "true" || runs.Load() != 1 {
				t.Fatalf("after: %+v, %d runs", r, runs.Load())
			}
		})
	}
}

// TestDeferKeepsTheClaim: a handler that calls Defer answers the client
// (504) while the work goes on: the key stays in progress (renewed past
// its lease) until end; end with a response stores it for the repeats;
// end with an unknown outcome leaves the key in progress until its lease
// passes.
func TestDeferKeepsTheClaim(t *testing.T) {
	ends := make(chan func(int, http.Header, []byte), 4)
	var runs atomic.Int32
	const lease = 300 * time.Millisecond
	srv := serve(t, idempotency.Options{Lease: lease}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ends <- idempotency.Defer(r)
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	if r := do(t, srv, "POST", "/", "k", ""); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first: %+v", r)
	}
	end := <-ends
	time.Sleep(2 * lease)
	if r := do(t, srv, "POST", "/", "k", ""); r.status != http.StatusConflict || runs.Load() != 1 {
		t.Fatalf("while the deferred work runs, past its lease: %+v, %d runs", r, runs.Load())
	}
	end(http.StatusCreated, http.Header{"Location": {"/late"}}, []byte("late answer"))
	var r response
	for try := 0; try < 100; try++ {
		if r = do(t, srv, "POST", "/", "k", ""); r.status != http.StatusConflict {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.status != 201 || r.body != "late answer" || r.header.Get("Location") != "/late" || r.header.Get(idempotency.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf("after the late answer: %+v, %d runs", r, runs.Load())
	}

	// The outcome unknown: in progress until the lease passes.
	do(t, srv, "POST", "/", "u", "")
	(<-ends)(0, nil, nil)
	start := time.Now()
	if r := do(t, srv, "POST", "/", "u", ""); r.status != http.StatusConflict || runs.Load() != 2 {
		t.Fatalf("an unknown outcome: %+v, %d runs", r, runs.Load())
	}
	time.Sleep(lease - time.Since(start) + 50*time.Millisecond)
	if r := do(t, srv, "POST", "/", "u", ""); r.status != http.StatusGatewayTimeout || runs.Load() != 3 {
		t.Fatalf("an unknown outcome, after the lease: %+v, %d runs", r, runs.Load())
	}
	(<-ends)(0, nil, nil)
}
