package idempotency_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/idempotency"
)

func newEngine(t testing.TB) *dedup.Engine {
	t.Helper()
	e, err := dedup.Open(dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// serve starts a server running h behind the middleware of o.
func serve(t testing.TB, o idempotency.Options, h http.Handler) *httptest.Server {
	t.Helper()
	if o.Store == nil {
		o.Store = newEngine(t)
	}
	mw, err := idempotency.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t testing.TB, srv *httptest.Server, method, path, key, body string) response {
	t.Helper()
	return send(t, srv.Client(), method, srv.URL+path, key, strings.NewReader(body))
}

// send sends a request with key (none if "") and body, and reads the
// response whole.
func send(t testing.TB, c *http.Client, method, url, key string, body io.Reader) response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := c.Do(req)
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

// counting returns a handler that counts its runs and answers status with
// a body naming the run.
func counting(runs *atomic.Int32, status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Run", fmt.Sprint(n))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"run":%d,"got":%q}`, n, b)
	})
}

func TestConcurrentRequestsOneExecution(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "order 1")
	})
	srv := serve(t, idempotency.Options{}, h)
	const n = 16
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- do(t, srv, "POST", "/orders", "key-1", "{}").status
		}()
	}
	// Every request but the running one answers 409 before the handler ends.
	conflicts := 0
	for conflicts < n-1 {
		if s := <-statuses; s != http.StatusConflict {
			t.Fatalf("status %d while the first request runs, want 409", s)
		}
		conflicts++
	}
	close(release)
	wg.Wait()
	if s := <-statuses; s != http.StatusCreated {
		t.Fatalf("first request: %d", s)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs, want 1", runs.Load())
	}
	r := do(t, srv, "POST", "/orders", "key-1", "{}")
	if r.status != http.StatusCreated || r.body != "order 1" || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %+v", r)
	}
}

func TestWaitGetsTheFirstResponse(t *testing.T) {
	var runs atomic.Int32
	started := make(chan struct{})
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		close(started)
		<-release
		io.WriteString(w, "done")
	})
	srv := serve(t, idempotency.Options{Wait: 10 * time.Second}, h)
	first := make(chan response)
	go func() { first <- do(t, srv, "POST", "/", "k", "") }()
	<-started
	second := make(chan response)
	go func() { second <- do(t, srv, "POST", "/", "k", "") }()
	time.Sleep(20 * time.Millisecond) // let the second request reach its wait
	close(release)
	a, b := <-first, <-second
	if a.body != "done" || b.body != "done" || b.header.Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Fatalf("first %+v, second %+v, %d runs", a, b, runs.Load())
	}
}

func TestReplayIsIdentical(t *testing.T) {
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Location", "/orders/7")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.Header().Set("Connection", "X-Conn-Only")
		w.Header().Set("X-Conn-Only", "1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":7}`)
	})
	srv := serve(t, idempotency.Options{}, h)
	a := do(t, srv, "POST", "/orders?x=1", "k", "body")
	b := do(t, srv, "POST", "/orders?x=1", "k", "body")
	if runs.Load() != 1 {
		t.Fatalf("%d runs", runs.Load())
	}
	if a.header.Get("Idempotent-Replayed") != "" || b.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay markers: first %q, second %q", a.header.Get("Idempotent-Replayed"), b.header.Get("Idempotent-Replayed"))
	}
	if b.status != 201 || b.body != a.body || b.header.Get("Location") != "/orders/7" ||
		strings.Join(b.header["X-Multi"], ",") != "a,b" || b.header.Get("Content-Type") != a.header.Get("Content-Type") {
		t.Fatalf("replay differs:\nfirst  %+v\nsecond %+v", a, b)
	}
	if b.header.Get("X-Conn-Only") != "" {
		t.Fatal("a header named by Connection was replayed")
	}
	if a.header.Get("Date") == "" || b.header.Get("Date") == "" {
		t.Fatal("Date missing")
	}
}

func TestOtherPayloadGets422(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{}, counting(&runs, 201))
	do(t, srv, "POST", "/a", "k", "one")
	for _, c := range []struct{ path, body string }{{"/a", "two"}, {"/b", "one"}} {
		r := do(t, srv, "POST", c.path, "k", c.body)
		if r.status != http.StatusUnprocessableEntity || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %q: %+v", c.path, c.body, r)
		}
		var p struct {
			Status int    `json:"status"`
			Title  string `json:"title"`
		}
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Status != 422 || p.Title == "" {
			t.Fatalf("problem body %q: %v", r.body, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs", runs.Load())
	}
	// PATCH with the same key and path is another request too.
	if r := do(t, srv, "PATCH", "/a", "k", "one"); r.status != 422 {
		t.Fatalf("PATCH: %d", r.status)
	}
}

func TestNotStoredStatusesReleaseTheKey(t *testing.T) {
	for _, status := range []int{500, 502, 503, 429} {
		var runs atomic.Int32
		srv := serve(t, idempotency.Options{}, counting(&runs, status))
		for i := 1; i <= 3; i++ {
			r := do(t, srv, "POST", "/", "k", "x")
			if r.status != status || r.header.Get("X-Run") != fmt.Sprint(i) {
				t.Fatalf("status %d, attempt %d: %+v", status, i, r)
			}
		}
	}
	// A 4xx other than 429 is a result: stored.
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{}, counting(&runs, 400))
	do(t, srv, "POST", "/", "k", "x")
	if r := do(t, srv, "POST", "/", "k", "x"); r.status != 400 || r.header.Get("X-Run") != "1" {
		t.Fatalf("400 not replayed: %+v", r)
	}
}

func TestPanicReleasesTheKey(t *testing.T) {
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "ok")
	})
	srv := serve(t, idempotency.Options{}, h)
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("Idempotency-Key", "k")
	if _, err := srv.Client().Do(req); err == nil {
		t.Fatal("the aborted request got a response")
	}
	if r := do(t, srv, "POST", "/", "k", ""); r.body != "ok" || runs.Load() != 2 {
		t.Fatalf("after a panic: %+v, %d runs", r, runs.Load())
	}
}

func TestLargeResponsePassesThroughUnstored(t *testing.T) {
	var runs atomic.Int32
	big := strings.Repeat("x", 5000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		for i := 0; i < 5; i++ {
			io.WriteString(w, big[:1000])
		}
	})
	srv := serve(t, idempotency.Options{MaxBody: 4096}, h)
	for i := 1; i <= 2; i++ {
		if r := do(t, srv, "POST", "/", "k", ""); r.body != big || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("attempt %d: %d bytes, replayed %q", i, len(r.body), r.header.Get("Idempotent-Replayed"))
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2 (a body over MaxBody is not stored)", runs.Load())
	}
	// At the limit it is stored.
	srv = serve(t, idempotency.Options{MaxBody: 5000}, h)
	do(t, srv, "POST", "/", "k", "")
	if r := do(t, srv, "POST", "/", "k", ""); r.body != big || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("at the limit: %d bytes, replayed %q", len(r.body), r.header.Get("Idempotent-Replayed"))
	}
}

func TestStreamingHandlerFlushes(t *testing.T) {
	next := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Error(err)
		}
		<-next
		io.WriteString(w, "second\n")
	})
	srv := serve(t, idempotency.Options{}, h)
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("Idempotency-Key", "stream")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v (the flush did not reach the client)", line, err)
	}
	close(next)
	rest, _ := io.ReadAll(br)
	res.Body.Close()
	if string(rest) != "second\n" {
		t.Fatalf("rest %q", rest)
	}
	if r := do(t, srv, "POST", "/", "stream", ""); r.body != "first\nsecond\n" || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of a streamed response: %+v", r)
	}
}

func TestBadKeys(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{RequireKey: true}, counting(&runs, 200))
	for name, keys := range map[string][]string{
		"missing":   nil,
		"empty":     {""},
		"too long":  {strings.Repeat("k", 256)},
		"space":     {"a b"},
		"non-ASCII": {"clé"},
		"twice":     {"a", "b"},
	} {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		if keys != nil {
			req.Header["Idempotency-Key"] = keys
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 400 || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q", name, res.StatusCode, b)
		}
	}
	if r := do(t, srv, "POST", "/", strings.Repeat("k", 255), ""); r.status != 200 {
		t.Fatalf("a 255-byte key: %+v", r)
	}
	if r := do(t, srv, "GET", "/", "", ""); r.status != 200 {
		t.Fatalf("GET without a key: %+v", r)
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", runs.Load())
	}

	// Without RequireKey a request without a key runs as is.
	srv = serve(t, idempotency.Options{}, counting(&runs, 200))
	do(t, srv, "POST", "/", "", "")
	do(t, srv, "POST", "/", "", "")
	if runs.Load() != 4 {
		t.Fatalf("%d runs, want 4", runs.Load())
	}
}

func TestRequestBodyLimit(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{MaxRequestBody: 10}, counting(&runs, 200))
	if r := do(t, srv, "POST", "/", "k", strings.Repeat("b", 11)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("%+v", r)
	}
	if r := do(t, srv, "POST", "/", "k", strings.Repeat("b", 10)); r.status != 200 || !strings.Contains(r.body, "bbbbbbbbbb") {
		t.Fatalf("%+v", r)
	}
}

func TestOptionsValidate(t *testing.T) {
	_, err := idempotency.New(idempotency.Options{Header: "Bad Header", Lease: -1, MaxBody: -1, Methods: []string{"post", "PATCH", "PURGE"}})
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), `"PURGE"`) || strings.Contains(err.Error(), `"PATCH"`) {
		t.Errorf("error %q names a method spelt right", err)
	}
	for _, want := range []string{"Store is required", "Header", "Lease", "MaxBody", `Methods holds "post"`, `"POST"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// TestLeaseOverTheWindowIs500: a Lease longer than the store's window
// answers 500 and runs nothing: no retry can pass.
func TestLeaseOverTheWindowIs500(t *testing.T) {
	e, err := dedup.Open(dedup.Options{Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	var runs atomic.Int32
	var logged atomic.Int32
	srv := serve(t, idempotency.Options{Store: e, Lease: time.Hour, ErrorLog: func(string, ...any) { logged.Add(1) }}, counting(&runs, 200))
	if r := do(t, srv, "POST", "/", "k", "b"); r.status != http.StatusInternalServerError || !strings.Contains(r.body, "lease") || runs.Load() != 0 || logged.Load() != 1 {
		t.Fatalf("%+v, ran %d times, %d lines logged; want 500 naming the lease, not run, logged", r, runs.Load(), logged.Load())
	}
}

func TestStoreFailureAnswers503(t *testing.T) {
	e, err := dedup.Open(dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{Store: e, ErrorLog: func(string, ...any) {}}, counting(&runs, 200))
	e.Close()
	if r := do(t, srv, "POST", "/", "k", ""); r.status != 503 || runs.Load() != 0 {
		t.Fatalf("%+v, %d runs", r, runs.Load())
	}
}

// TestKeyOverTheStoreLimitIs500: a key the store refuses as too large (a
// long Scope, a MaxKeyLength above the store's MaxKeySize) fails no matter
// how often it is retried: 500 without Retry-After, not the 503 of a store
// that is down; nothing runs.
func TestKeyOverTheStoreLimitIs500(t *testing.T) {
	var runs atomic.Int32
	var logged atomic.Int32
	for _, o := range []idempotency.Options{
		{Scope: func(*http.Request) string { return strings.Repeat("s", 5000) }},
		{MaxKeyLength: 5000},
	} {
		o.ErrorLog = func(string, ...any) { logged.Add(1) }
		srv := serve(t, o, counting(&runs, 200))
		key := "k"
		if o.MaxKeyLength > 0 {
			key = strings.Repeat("k", 4500)
		}
		r := do(t, srv, "POST", "/", key, "")
		if r.status != http.StatusInternalServerError || r.header.Get("Retry-After") != "" || runs.Load() != 0 {
			t.Errorf("scope %v, key of %d bytes: %d, Retry-After %q, %d runs; want 500 without Retry-After, no run",
				o.Scope != nil, len(key), r.status, r.header.Get("Retry-After"), runs.Load())
		}
	}
	if logged.Load() != 2 {
		t.Errorf("%d lines logged, want 2", logged.Load())
	}
}

// slowComplete is an engine whose Complete waits for a signal.
type slowComplete struct {
	*dedup.Engine
	proceed chan struct{}
}

func (s slowComplete) Complete(ctx context.Context, key []byte, tok dedup.Token, result []byte) error {
	<-s.proceed
	return s.Engine.Complete(ctx, key, tok, result)
}

// TestWholeResponseOnlyAfterStored: a client never holds the whole
// response before it is stored, so a retry after it got one is a replay,
// whatever crashes between.
func TestWholeResponseOnlyAfterStored(t *testing.T) {
	for _, size := range []int{1, 100, 5000, 64 << 10} {
		st := slowComplete{newEngine(t), make(chan struct{})}
		body := strings.Repeat("b", size)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			io.WriteString(w, body)
			http.NewResponseController(w).Flush()
		})
		srv := serve(t, idempotency.Options{Store: st}, h)
		got := make(chan response, 1)
		go func() { got <- do(t, srv, "POST", "/", "k", "") }()
		select {
		case r := <-got:
			close(st.proceed)
			t.Fatalf("%d bytes: the client got the whole response (%d bytes) before it was stored", size, len(r.body))
		case <-time.After(200 * time.Millisecond):
		}
		close(st.proceed)
		if r := <-got; r.body != body {
			t.Fatalf("%d bytes: got %d", size, len(r.body))
		}
	}
}

// TestTrailersReplayed: the trailers of the first response (declared in
// Trailer, or set with http.TrailerPrefix after the body) are stored and
// sent again, as trailers, with the replay.
func TestTrailersReplayed(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, idempotency.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "payload")
		w.Header().Set("X-Checksum", "c0ffee")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	}))
	want := http.Header{"X-Checksum": {"c0ffee"}, "X-Late": {"late"}}
	for i := 0; i < 2; i++ {
		req, err := http.NewRequest("POST", srv.URL+"/", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "with-trailers")
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body) // trailers arrive with the end of the body
		res.Body.Close()
		if err != nil || res.StatusCode != 201 || string(b) != "payload" || !reflect.DeepEqual(res.Trailer, want) {
			t.Errorf("request %d: %d %q %v, trailers %v; want 201 %q, trailers %v", i+1, res.StatusCode, b, err, res.Trailer, "payload", want)
		}
		if i == 1 && res.Header.Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("the second request was not replayed: %v", res.Header)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("%d runs", runs.Load())
	}
}
