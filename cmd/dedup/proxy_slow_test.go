package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestProxySlowUpstreamRunsOnce: an upstream slower than --lease and
// --timeout: the client gets 504, the key stays claimed (renewed) while
// the call goes on, so the retry gets 409, not a second run; once the
// upstream answers, the retry gets its response.
func TestProxySlowUpstreamRunsOnce(t *testing.T) {
	var runs atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n := runs.Add(1)
		time.Sleep(1200 * time.Millisecond)
		w.Header().Set("Location", "/charges/"+strconv.Itoa(int(n)))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged "+strconv.Itoa(int(n)))
	}))
	defer up.Close()
	url, stop := runProxyInProcess(t, "--upstream", up.URL, "--state", t.TempDir(), "--lease", "300ms", "--timeout", "400ms")
	defer stop()
	if r := post(t, url+"/charges", "slow", "{}"); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first: %+v", r)
	}
	time.Sleep(400 * time.Millisecond) // past the lease, the upstream still working
	if r := post(t, url+"/charges", "slow", "{}"); r.status != http.StatusConflict || runs.Load() != 1 {
		t.Fatalf("retry while the upstream works, past --lease: %+v, %d runs", r, runs.Load())
	}
	var r proxyResponse
	for try := 0; try < 100; try++ {
		if r = post(t, url+"/charges", "slow", "{}"); r.status != http.StatusConflict {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r.status != 201 || r.body != "charged 1" || r.header.Get("Location") != "/charges/1" || r.header.Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Fatalf("retry after the upstream answered: %+v, %d runs", r, runs.Load())
	}
}

// TestProxyBrokenAfterSendKeepsClaim: an upstream that drops the
// connection after it read the request may have done the work: the
// client gets 502 and the key stays in progress until its lease passes,
// not released for a second run at once. A 502 of an upstream never
// reached (refused) is released.
func TestProxyBrokenAfterSendKeepsClaim(t *testing.T) {
	var runs atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		runs.Add(1)
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	defer up.Close()
	url, stop := runProxyInProcess(t, "--upstream", up.URL, "--state", t.TempDir(), "--lease", "500ms")
	defer stop()
	if r := post(t, url+"/charges", "b", "{}"); r.status != http.StatusBadGateway {
		t.Fatalf("first: %+v", r)
	}
	start := time.Now()
	n := runs.Load()
	if r := post(t, url+"/charges", "b", "{}"); r.status != http.StatusConflict || runs.Load() != n {
		t.Fatalf("retry after a connection broken after the request was sent: %+v, %d runs (was %d)", r, runs.Load(), n)
	}
	time.Sleep(500*time.Millisecond - time.Since(start) + 100*time.Millisecond)
	if r := post(t, url+"/charges", "b", "{}"); r.status != http.StatusBadGateway || runs.Load() == n {
		t.Fatalf("after the lease: %+v, %d runs", r, runs.Load())
	}

	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()
	url2, stop2 := runProxyInProcess(t, "--upstream", refused.URL, "--state", t.TempDir(), "--lease", "1m")
	defer stop2()
	for i := 0; i < 2; i++ {
		if r := post(t, url2+"/charges", "c", "{}"); r.status != http.StatusBadGateway {
			t.Fatalf("refused, attempt %d: %+v (want 502 both times: released)", i, r)
		}
	}
}
