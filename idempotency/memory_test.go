package idempotency_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/streamdedup/dedup/idempotency"
)

// blocker is a handler that reads the body, says so on entered, and
// answers 200 with a body of the size the query's n asks for (with its
// Content-Length). On the path /block it waits for release before it
// answers; on /hold it sends the head and the first byte, then waits.
type blocker struct {
	runs    sync.Map // key -> *atomic.Int32
	entered chan string
	release chan struct{}
	once    sync.Once
}

// unblock lets every waiting request answer.
func (b *blocker) unblock() { b.once.Do(func() { close(b.release) }) }

func newBlocker() *blocker {
	return &blocker{entered: make(chan string, 16), release: make(chan struct{})}
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	c, _ := b.runs.LoadOrStore(key, new(atomic.Int32))
	c.(*atomic.Int32).Add(1)
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	body := []byte(strings.Repeat("r", n))
	if r.URL.Path == "/block" {
		b.entered <- key
		<-b.release
	}
	w.Header().Set("Content-Length", strconv.Itoa(n))
	if r.URL.Path == "/hold" {
		w.Write(body[:1])
		w.(http.Flusher).Flush()
		b.entered <- key
		<-b.release
		body = body[1:]
	}
	w.Write(body)
}

func (b *blocker) count(key string) int32 {
	c, ok := b.runs.Load(key)
	if !ok {
		return 0
	}
	return c.(*atomic.Int32).Load()
}

// post sends a keyed POST whose body, unless known is set, has no
// Content-Length (chunked).
func post(t *testing.T, url, key, body string, known bool) response {
	t.Helper()
	var rd io.Reader = strings.NewReader(body)
	if !known {
		rd = io.MultiReader(rd) // a reader net/http does not know the length of
	}
	return send(t, http.DefaultClient, "POST", url, key, rd)
}

// TestMemoryBoundsRequestBodies: request bodies held by requests in
// flight stay within MaxMemory; the keyed request that does not fit gets
// 503 with Retry-After and does not run, and runs once memory is back.
func TestMemoryBoundsRequestBodies(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run("known length "+strconv.FormatBool(known), func(t *testing.T) {
			b := newBlocker()
			var overloaded atomic.Int32
			srv := serve(t, idempotency.Options{MaxRequestBody: 64 << 10, MaxBody: 16 << 10, MaxMemory: 150 << 10,
				Report: func(_ *http.Request, o idempotency.Outcome, _ int) {
					if o == idempotency.Overloaded {
						overloaded.Add(1)
					}
				}}, b)
			t.Cleanup(b.unblock) // before the server closes, on a failure too
			body := strings.Repeat("b", 60<<10)
			var wg sync.WaitGroup
			for _, k := range []string{"a", "b"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r := post(t, srv.URL+"/block?n=10", k, body, known); r.status != 200 {
						t.Errorf("%s: %+v", k, r.status)
					}
				}()
				<-b.entered
			}
			r := post(t, srv.URL+"/?n=10", "c", body, known)
			if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || b.count("c") != 0 || overloaded.Load() != 1 {
				t.Fatalf("third body beside two held: %d %v, ran %d times, %d overloaded; want 503 with Retry-After, not run",
					r.status, r.header, b.count("c"), overloaded.Load())
			}
			b.unblock()
			wg.Wait()
			if r := post(t, srv.URL+"/?n=10", "c", body, known); r.status != 200 || b.count("c") != 1 {
				t.Fatalf("retry with memory back: %d, ran %d times", r.status, b.count("c"))
			}
		})
	}
}

// TestMemoryBoundsResponses: a response that does not fit in MaxMemory
// beside the ones in flight is sent whole, not stored, and its key
// released; a replay that does not fit gets 503; both work once memory is
// back.
func TestMemoryBoundsResponses(t *testing.T) {
	b := newBlocker()
	srv := serve(t, idempotency.Options{MaxRequestBody: 1 << 10, MaxBody: 64 << 10, MaxMemory: 100 << 10}, b)
	t.Cleanup(b.unblock) // before the server closes, on a failure too
	if r := post(t, srv.URL+"/?n=45000", "stored", "x", true); r.status != 200 || len(r.body) != 45000 {
		t.Fatalf("stored: %d, %d bytes", r.status, len(r.body))
	}
	// A response of 60 KiB being recorded holds its memory.
	done := make(chan response)
	go func() { done <- post(t, srv.URL+"/hold?n=61440", "held", "x", true) }()
	<-b.entered
	for i := 1; i <= 2; i++ {
		r := post(t, srv.URL+"/?n=45000", "big", "x", true)
		if r.status != 200 || len(r.body) != 45000 || r.header.Get(idempotency.ReplayedHeader) != "" || b.count("big") != int32(i) {
			t.Fatalf("response over the memory left, try %d: %d, %d bytes, replayed %q, ran %d times; want sent whole, not stored",
				i, r.status, len(r.body), r.header.Get(idempotency.ReplayedHeader), b.count("big"))
		}
	}
	if r := post(t, srv.URL+"/?n=45000", "stored", "x", true); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("replay over the memory left: %d %v, want 503 with Retry-After", r.status, r.header)
	}
	b.unblock()
	if r := <-done; r.status != 200 || len(r.body) != 61440 {
		t.Fatalf("held: %d, %d bytes", r.status, len(r.body))
	}
	for k, path := range map[string]string{"held": "/hold?n=61440", "stored": "/?n=45000"} {
		if r := post(t, srv.URL+path, k, "x", true); r.status != 200 || r.header.Get(idempotency.ReplayedHeader) != "true" {
			t.Fatalf("%s with memory back: %d %v, want replayed", k, r.status, r.header)
		}
	}
	for i := 0; i < 2; i++ {
		post(t, srv.URL+"/?n=45000", "big", "x", true)
	}
	if n := b.count("big"); n != 3 {
		t.Fatalf("big ran %d times, want 3: once more with memory back, then replayed", n)
	}
}

func TestMaxMemoryValidate(t *testing.T) {
	e := newEngine(t)
	for _, o := range []idempotency.Options{
		{Store: e, MaxMemory: -1},
		{Store: e, MaxMemory: 10 << 20},                                  // under the default 10 MiB + 1 MiB
		{Store: e, MaxMemory: 5000, MaxRequestBody: 4000, MaxBody: 2000}, // under 6000
	} {
		if _, err := idempotency.New(o); err == nil || !strings.Contains(err.Error(), "MaxMemory") {
			t.Errorf("MaxMemory %d, MaxRequestBody %d, MaxBody %d: error %v, want one naming MaxMemory", o.MaxMemory, o.MaxRequestBody, o.MaxBody, err)
		}
	}
	if _, err := idempotency.New(idempotency.Options{Store: e, MaxMemory: 6000, MaxRequestBody: 4000, MaxBody: 2000}); err != nil {
		t.Error(err)
	}
}
