package idempotency_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamdedup/dedup/idempotency"
)

// TestKeysAsStructuredFieldStrings: "abc" and abc are one key; a quoted
// key may hold spaces and escapes; malformed strings get 400.
func TestKeysAsStructuredFieldStrings(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{}, counting(&runs, 201))
	if r := do(t, srv, "POST", "/", "abc", ""); r.status != 201 || runs.Load() != 1 {
		t.Fatalf("abc: %+v", r)
	}
	if r := do(t, srv, "POST", "/", `"abc"`, ""); r.header.Get(idempotency.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf(`"abc" after abc: %+v, %d runs`, r, runs.Load())
	}
	if r := do(t, srv, "POST", "/", `"order 42"`, ""); r.status != 201 || runs.Load() != 2 {
		t.Fatalf("a quoted key with a space: %+v", r)
	}
	if r := do(t, srv, "POST", "/", `"a\"b\\c"`, ""); r.status != 201 || runs.Load() != 3 {
		t.Fatalf("escapes: %+v", r)
	}
	if r := do(t, srv, "POST", "/", `"a\"b\\c"`, ""); r.header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("escapes, again: %+v", r)
	}
	for _, bad := range []string{`"abc`, `"ab"c`, `"a\b"`, `""`} {
		if r := do(t, srv, "POST", "/", bad, ""); r.status != 400 || runs.Load() != 3 {
			t.Fatalf("%s: %+v", bad, r)
		}
	}
}

// TestConflictSaysTheLeaseLeft: a key whose owner is gone (here: claimed
// straight on the store, never ended) gets 409 with Retry-After the
// seconds left on its lease, not 1.
func TestConflictSaysTheLeaseLeft(t *testing.T) {
	e := newEngine(t)
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{Store: e}, counting(&runs, 201))
	if _, err := e.Begin(context.Background(), []byte("crashed"), nil, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r := do(t, srv, "POST", "/", "crashed", "")
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != http.StatusConflict || err != nil || n < 29 || n > 30 {
		t.Fatalf("409 of a key with 30 s of lease left: %+v, want Retry-After 30", r)
	}
}

// TestProblemTypesLinkTheDocs: a problem body's type is the link to its
// documentation, not about:blank.
func TestProblemTypesLinkTheDocs(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{}, counting(&runs, 201))
	do(t, srv, "POST", "/", "k", "one")
	r := do(t, srv, "POST", "/", "k", "two")
	var p struct{ Type, Title string }
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != idempotency.ProblemDocs+"#idempotency-key-reused" || !strings.HasPrefix(p.Type, "https://") {
		t.Fatalf("type %q of %q", p.Type, p.Title)
	}
}
