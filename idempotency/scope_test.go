package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/streamdedup/dedup/idempotency"
)

// TestScopeByHeaders: requests with other credentials never meet on a
// key; the same credentials do; a request with none has a namespace of
// its own; the stored key holds a hash, not the credential.
func TestScopeByHeaders(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{Scope: idempotency.ScopeByHeaders("Authorization", "X-Api-Key"), MinKeyLength: 4},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "run %d for %s", runs.Add(1), r.Header.Get("Authorization"))
		}))
	post := func(auth, key string) response {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return response{res.StatusCode, res.Header, string(b)}
	}
	a := post("Bearer alice", "key1")
	b := post("Bearer bob", "key1")
	if strings.Contains(b.body, "alice") || runs.Load() != 2 {
		t.Fatalf("bob: %+v (%d runs)", b, runs.Load())
	}
	if r := post("Bearer alice", "key1"); r.body != a.body || r.header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("alice again: %+v", r)
	}
	if r := post("", "key1"); r.status != 200 || runs.Load() != 3 {
		t.Fatalf("no credentials: %+v", r)
	}
	if r := post("Bearer alice", "k1"); r.status != 400 {
		t.Fatalf("a 2-byte key under MinKeyLength 4: %+v", r)
	}
	scope := idempotency.ScopeByHeaders("Authorization")
	r1, _ := http.NewRequest("POST", "/", nil)
	r1.Header.Set("Authorization", "Bearer secret-token")
	if s := scope(r1); s == "" || strings.Contains(s, "secret") || len(s) != 32 {
		t.Fatalf("scope %q", s)
	}
	r2, _ := http.NewRequest("POST", "/", nil)
	if s := scope(r2); s != "" {
		t.Fatalf("scope of a request without the header: %q", s)
	}
	if _, err := idempotency.New(idempotency.Options{Store: newEngine(t), MinKeyLength: 300}); err == nil || !strings.Contains(err.Error(), "MinKeyLength 300") {
		t.Fatalf("MinKeyLength over MaxKeyLength: %v", err)
	}
}
