package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// upstreamAPI is a test API that counts the executions of each key and
// can hold a key's request until released.
type upstreamAPI struct {
	mu       sync.Mutex
	runs     map[string]int
	hold     map[string]chan struct{} // requests of these keys wait for a close
	arrived  chan string
	srv      *httptest.Server
	requests atomic.Int32
}

func newUpstreamAPI(t *testing.T) *upstreamAPI {
	u := &upstreamAPI{runs: map[string]int{}, hold: map[string]chan struct{}{}, arrived: make(chan string, 100)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		key := r.Header.Get("Idempotency-Key")
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.runs[key]++
		n := u.runs[key]
		h := u.hold[key]
		u.mu.Unlock()
		u.arrived <- key
		if h != nil {
			<-h
		}
		if strings.HasPrefix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/charges/"+key)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q,"run":%d,"body":%q}`, key, n, body)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstreamAPI) runsOf(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[key]
}

func (u *upstreamAPI) holdKey(key string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := make(chan struct{})
	u.hold[key] = c
	return c
}

// proxyChild is a running `dedup proxy` child process.
type proxyChild struct {
	*child
	url string
}

func startProxy(t *testing.T, bin string, args ...string) *proxyChild {
	t.Helper()
	c := startChild(t, bin, "proxy", args...)
	return &proxyChild{child: c, url: "http://" + c.addr}
}

func (c *proxyChild) kill9(t *testing.T) {
	t.Helper()
	_ = c.signal(t, syscall.SIGKILL)
}

type proxyResponse struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url, key, body string) proxyResponse {
	t.Helper()
	r, err := postErr(url, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func postErr(url, key, body string) (proxyResponse, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return proxyResponse{}, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return proxyResponse{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return proxyResponse{res.StatusCode, res.Header, string(b)}, err
}

// TestProxyKill9 runs the real binary and kills it with SIGKILL: a stored
// response replays identically after the restart; a request whose upstream
// call was running at the kill gets 409 after the restart, not a second
// upstream call, until its lease ends; then it runs again.
func TestProxyKill9(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	up := newUpstreamAPI(t)
	state := t.TempDir()
	const lease = 6 * time.Second
	args := []string{"--upstream", up.srv.URL, "--state", state, "--lease", lease.String()}
	p := startProxy(t, bin, args...)

	first := post(t, p.url+"/charges", "ch-1", `{"amount":100}`)
	if first.status != 201 || up.runsOf("ch-1") != 1 {
		t.Fatalf("first request: %+v, %d runs", first, up.runsOf("ch-1"))
	}
	release := up.holdKey("ch-2")
	go postErr(p.url+"/charges", "ch-2", `{"amount":200}`) // dies with the proxy
	if k := <-up.arrived; k != "ch-1" {
		t.Fatalf("arrived %q", k)
	}
	if k := <-up.arrived; k != "ch-2" {
		t.Fatalf("arrived %q", k)
	}
	claimed := time.Now() // ch-2's lease ends before claimed+lease
	p.kill9(t)
	close(release)

	p = startProxy(t, bin, args...)
	again := post(t, p.url+"/charges", "ch-1", `{"amount":100}`)
	if again.status != 201 || again.body != first.body || again.header.Get("Location") != first.header.Get("Location") ||
		again.header.Get("Content-Type") != first.header.Get("Content-Type") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after kill -9 differs:\nfirst %+v\nagain %+v", first, again)
	}
	if up.runsOf("ch-1") != 1 {
		t.Fatalf("ch-1 ran %d times", up.runsOf("ch-1"))
	}
	inflight := post(t, p.url+"/charges", "ch-2", `{"amount":200}`)
	if time.Since(claimed) < lease-time.Second {
		if inflight.status != http.StatusConflict || inflight.header.Get("Retry-After") == "" {
			t.Fatalf("retry of the request killed in flight: %+v, want 409 with Retry-After", inflight)
		}
		if up.runsOf("ch-2") != 1 {
			t.Fatalf("ch-2 ran %d times before its lease ended", up.runsOf("ch-2"))
		}
	} else {
		t.Fatalf("the restart took %v, past the lease: 409 not checked", time.Since(claimed))
	}
	time.Sleep(time.Until(claimed.Add(lease)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := post(t, p.url+"/charges", "ch-2", `{"amount":200}`)
		if r.status == 201 {
			break
		}
		if r.status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("after the lease: %+v", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if up.runsOf("ch-2") != 2 {
		t.Fatalf("ch-2 ran %d times, want 2 (once before the kill, once after its lease)", up.runsOf("ch-2"))
	}
}

// runProxyInProcess runs `dedup proxy args...` in this process; stop sends
// it SIGTERM and returns its exit status and stderr.
func runProxyInProcess(t *testing.T, args ...string) (url string, stop func() (int, string)) {
	t.Helper()
	addr, stop := runInProcess(t, "proxy", args...)
	return "http://" + addr, stop
}

// TestProxyConcurrentOneExecution: many clients send one key at once; the
// upstream runs it once, every other client gets 409, and a later repeat
// (by curl too) gets the stored response.
func TestProxyConcurrentOneExecution(t *testing.T) {
	up := newUpstreamAPI(t)
	release := up.holdKey("order-9")
	url, stop := runProxyInProcess(t, "--upstream", up.srv.URL, "--state", t.TempDir())
	const n = 24
	results := make(chan proxyResponse, n)
	for i := 0; i < n; i++ {
		go func() {
			r, err := postErr(url+"/orders", "order-9", "{}")
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	<-up.arrived
	for i := 0; i < n-1; i++ {
		if r := <-results; r.status != http.StatusConflict {
			t.Fatalf("while the first runs: %+v", r)
		}
	}
	close(release)
	if r := <-results; r.status != 201 {
		t.Fatalf("the first: %+v", r)
	}
	if up.runsOf("order-9") != 1 {
		t.Fatalf("%d upstream runs", up.runsOf("order-9"))
	}
	if _, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command("curl", "-si", "-X", "POST", "-H", "Idempotency-Key: order-9", "-d", "{}", url+"/orders").CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		s := string(out)
		if !strings.Contains(s, "HTTP/1.1 201") || !strings.Contains(s, "Idempotent-Replayed: true") || !strings.Contains(s, `"run":1`) {
			t.Fatalf("curl replay:\n%s", s)
		}
	} else {
		t.Log("curl not installed: curl replay not checked")
	}
	if code, log := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}
}

// TestProxyMatrix: 422 for the key with another body, 5xx released and
// retried upstream, large and streamed responses, bad keys.
func TestProxyMatrix(t *testing.T) {
	up := newUpstreamAPI(t)
	big := strings.Repeat("z", 3000)
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "part %d\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
	}))
	defer stream.Close()
	url, stop := runProxyInProcess(t, "--upstream", up.srv.URL, "--state", t.TempDir(), "--require-key")
	post(t, url+"/charges", "m", "one")
	if r := post(t, url+"/charges", "m", "two"); r.status != 422 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("other body: %+v", r)
	}
	for i := 1; i <= 2; i++ {
		if r := post(t, url+"/fail", "f", ""); r.status != 503 || up.runsOf("f") != i {
			t.Fatalf("5xx, attempt %d: %+v, %d runs", i, r, up.runsOf("f"))
		}
	}
	if r := post(t, url+"/charges", "", ""); r.status != 400 {
		t.Fatalf("no key under --require-key: %+v", r)
	}
	if r := post(t, url+"/charges", strings.Repeat("k", 256), ""); r.status != 400 {
		t.Fatalf("a 256-byte key: %+v", r)
	}
	if code, log := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}

	url, stop = runProxyInProcess(t, "--upstream", stream.URL, "--state", t.TempDir(), "--max-body", "2KiB")
	for i := 0; i < 2; i++ {
		if r := post(t, url+"/big", "b", ""); r.body != big || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("big response, attempt %d: %d bytes, replayed %q", i, len(r.body), r.header.Get("Idempotent-Replayed"))
		}
	}
	want := "part 0\npart 1\npart 2\n"
	if r := post(t, url+"/stream", "s", ""); r.body != want {
		t.Fatalf("streamed: %q", r.body)
	}
	if r := post(t, url+"/stream", "s", ""); r.body != want || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("streamed replay: %+v", r)
	}
	stop()
}

// TestProxySIGTERMFinishesInFlight: SIGTERM lets a request in flight
// finish and store its response; the next proxy replays it.
func TestProxySIGTERMFinishesInFlight(t *testing.T) {
	up := newUpstreamAPI(t)
	state := t.TempDir()
	release := up.holdKey("slow")
	url, stop := runProxyInProcess(t, "--upstream", up.srv.URL, "--state", state)
	got := make(chan proxyResponse, 1)
	go func() { got <- post(t, url, "slow", "") }()
	<-up.arrived
	exited := make(chan int, 1)
	go func() {
		code, _ := stop()
		exited <- code
	}()
	time.Sleep(50 * time.Millisecond)
	close(release)
	if r := <-got; r.status != 201 {
		t.Fatalf("in flight at SIGTERM: %+v", r)
	}
	if code := <-exited; code != 0 {
		t.Fatalf("exit %d", code)
	}
	url, stop = runProxyInProcess(t, "--upstream", up.srv.URL, "--state", state)
	if r := post(t, url, "slow", ""); r.header.Get("Idempotent-Replayed") != "true" || up.runsOf("slow") != 1 {
		t.Fatalf("after the restart: %+v, %d runs", r, up.runsOf("slow"))
	}
	stop()
}

func TestProxyFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "x"}, "--upstream URL is required"},
		{[]string{"--upstream", "localhost:3000", "--state", "x"}, "want an http:// or https:// URL"},
		{[]string{"--upstream", "http://h"}, "--state DIR or --store URL is required"},
		{[]string{"--upstream", "http://h", "--state", "x", "--store", "redis://127.0.0.1:6380"}, "--state and --store are exclusive"},
		{[]string{"--upstream", "http://h", "--store", "http://127.0.0.1:6380"}, "proxy: --store \"http://127.0.0.1:6380\""},
		{[]string{"--upstream", "http://h", "--state", "x", "--store-status", "2xx,20"}, "--store-status holds \"20\""},
		{[]string{"--upstream", "http://h", "--state", "x", "--lease", "0s"}, "--lease must be positive"},
		{[]string{"--upstream", "http://h", "--state", "x", "--max-body", "1MB"}, "want a positive number of bytes"},
		{[]string{"--upstream", "http://h", "--state", "x", "--header", "Bad Name"}, "proxy: --header must be a header name"},
		{[]string{"--upstream", "http://h", "--state", "x", "--methods", "POST,,PATCH"}, `proxy: --methods holds "", not a method`},
		{[]string{"--upstream", "http://h", "--state", "x", "--header", ""}, "--header must name a header"},
		{[]string{"--upstream", "http://h", "--state", "x", "--window", "4s", "--lease", "30s"}, "proxy: --lease 30s is longer than --window 4s"},
		{[]string{"--upstream", "http://h", "--state", "x", "--rate", "0"}, "--rate: must not be zero"},
		{[]string{"--upstream", "http://h", "--state", "x", "--rate", "-5"}, "--rate: must be in"},
		{[]string{"--upstream", "http://h", "--state", "x", "--max-memory", "1MiB"}, "proxy: --max-memory must hold one request's body and response, --max-request-body + --max-body"},
		{[]string{"--upstream", "http://h", "--state", "x", "--max-memory", "0"}, "want a positive number of bytes"},
		{[]string{"--upstream", "http://h", "--state", "x", "--scope-header", "none", "--scope-header", "X-Api-Key"}, "--scope-header none turns scoping off"},
		{[]string{"--upstream", "http://h", "--state", "x", "--scope-header", "Bad:Name"}, "--scope-header must name a header"},
		{[]string{"--upstream", "http://h", "--state", "x", "--min-key-length", "0"}, "--min-key-length must be at least 1"},
		{[]string{"--upstream", "http://h", "--state", "x", "--min-key-length", "300"}, "--min-key-length 300 is over the longest key 255"},
	} {
		var stderr strings.Builder
		// A proxy that starts in spite of the bad flag stops at once.
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, sigs: sigs}
		args := []string{"proxy", "--listen", "127.0.0.1:0"}
		for _, a := range c.args {
			if a == "x" {
				a = t.TempDir() // no state left behind
			}
			args = append(args, a)
		}
		if code := run(e, args); code != exitBad || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 naming %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestProxySIGTERMUnfinishedKeepsClaim: a request still at the upstream
// when --drain runs out is cut off; its claim stays on disk, so the next
// proxy on the state answers a retry with 409 and does not send it
// upstream again.
func TestProxySIGTERMUnfinishedKeepsClaim(t *testing.T) {
	up := newUpstreamAPI(t)
	state := t.TempDir()
	release := up.holdKey("stuck")
	defer close(release)
	url, stop := runProxyInProcess(t, "--upstream", up.srv.URL, "--state", state, "--drain", "100ms")
	go postErr(url, "stuck", "")
	<-up.arrived
	if code, stderr := stop(); code != 0 || !strings.Contains(stderr, "keep their claims") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	url, stop = runProxyInProcess(t, "--upstream", up.srv.URL, "--state", state)
	defer stop()
	if r := post(t, url, "stuck", ""); r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
		t.Fatalf("retry after the restart: %+v", r)
	}
	if n := up.runsOf("stuck"); n != 1 {
		t.Fatalf("stuck ran %d times, want 1", n)
	}
}

// TestProxyMetrics: --metrics serves the outcomes (executed, replayed,
// conflict, mismatch, released), the bytes stored and the upstream
// latency.
func TestProxyMetrics(t *testing.T) {
	up := newUpstreamAPI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := ln.Addr().String()
	ln.Close()
	url, stop := runProxyInProcess(t, "--upstream", up.srv.URL, "--state", t.TempDir(), "--metrics", maddr)
	defer stop()
	first := post(t, url+"/charges", "a", `{"n":1}`) // executed
	if first.status != 201 {
		t.Fatalf("first: %+v", first)
	}
	post(t, url+"/charges", "a", `{"n":1}`) // replayed
	post(t, url+"/charges", "a", `{"n":1}`) // replayed
	post(t, url+"/charges", "a", `{"n":2}`) // mismatch
	post(t, url+"/fail", "b", "")           // released
	<-up.arrived                            // a
	<-up.arrived                            // b
	release := up.holdKey("c")
	held := make(chan error, 1)
	go func() { _, err := postErr(url+"/charges", "c", ""); held <- err }()
	<-up.arrived                     // c, held
	post(t, url+"/charges", "c", "") // conflict
	close(release)
	// c's response ends only once its outcome is counted (the middleware
	// holds its last byte back until the result is stored).
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	metrics := string(b)
	for _, want := range []string{
		`dedup_proxy_requests_total{outcome="executed"} 2`,
		`dedup_proxy_requests_total{outcome="replayed"} 2`,
		`dedup_proxy_requests_total{outcome="mismatch"} 1`,
		`dedup_proxy_requests_total{outcome="released"} 1`,
		`dedup_proxy_requests_total{outcome="conflict"} 1`,
		`dedup_proxy_requests_total{outcome="failed"} 0`, // every outcome from the start
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if v := metricValue(t, metrics, "dedup_proxy_stored_bytes_total"); v < float64(len(first.body)) {
		t.Errorf("stored bytes %v, less than the stored body's %d", v, len(first.body))
	}
	if v := metricValue(t, metrics, "dedup_proxy_upstream_seconds_count"); v < 2 {
		t.Errorf("upstream latency observed %v times, want at least 2", v)
	}
}

// metricValue returns the value of the unlabelled metric name in a
// Prometheus text exposition.
func metricValue(t *testing.T, metrics, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in the metrics:\n%s", name, metrics)
	return 0
}

// TestProxyPassesAcceptEncoding: the proxy forwards the client's
// Accept-Encoding as it is, and adds none: a client that asks for no
// compression gets (and has stored) the upstream's plain response.
func TestProxyPassesAcceptEncoding(t *testing.T) {
	seen := make(chan []string, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Values("Accept-Encoding")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "plain")
	}))
	defer up.Close()
	url, stop := runProxyInProcess(t, "--upstream", up.URL, "--state", t.TempDir())
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for _, ae := range []string{"", "br"} {
		req, err := http.NewRequest("POST", url+"/charges", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "ae-"+ae)
		if ae != "" {
			req.Header.Set("Accept-Encoding", ae)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got := <-seen
		if (ae == "" && len(got) != 0) || (ae != "" && (len(got) != 1 || got[0] != ae)) {
			t.Fatalf("client's Accept-Encoding %q: the upstream saw %q", ae, got)
		}
		if res.StatusCode != 201 || string(b) != "plain" {
			t.Fatalf("Accept-Encoding %q: %d %q", ae, res.StatusCode, b)
		}
	}
	if code, log := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}
}

// TestProxyLogsUpstreamFailures: a keyed request to an upstream that
// refuses connections gets 502 (its key released: the retry is sent
// upstream again), and stderr says why, once for a burst of them.
func TestProxyLogsUpstreamFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	url, stop := runProxyInProcess(t, "--upstream", dead, "--state", t.TempDir())
	for range 5 {
		if r := post(t, url, "order-1", "{}"); r.status != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", r.status)
		}
	}
	code, stderr := stop()
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if n := strings.Count(stderr, "upstream POST / failed, answered 502"); n != 1 || !strings.Contains(stderr, "connection refused") {
		t.Errorf("stderr has %d failure lines, want 1 naming the refused connection:\n%s", n, stderr)
	}
}

// TestProxyLeaseBoundsOnlyKeyedCalls: only a keyed request (one the
// proxy stores the response of) outlives its client and is bounded by
// --lease; a GET, or a POST without a key, is a plain proxied call: an
// event stream or a slow answer longer than the lease reaches the client
// whole, and a client that hangs up ends the upstream call.
func TestProxyLeaseBoundsOnlyKeyedCalls(t *testing.T) {
	const parts = 6
	ended := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
			case <-time.After(10 * time.Second):
				ended <- errors.New("the upstream call outlived its client by 10s")
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < parts; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}))
	defer up.Close()
	url, stop := runProxyInProcess(t, "--upstream", up.URL, "--state", t.TempDir(), "--lease", "250ms", "--call-limit", "250ms")
	var want strings.Builder
	for i := 0; i < parts; i++ {
		fmt.Fprintf(&want, "data: %d\n\n", i)
	}
	for _, method := range []string{"GET", "POST"} {
		req, err := http.NewRequest(method, url+"/events", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || err != nil || string(b) != want.String() {
			t.Errorf("unkeyed %s of a %d ms stream through --call-limit 250ms: %d %q, %v", method, parts*100, res.StatusCode, b, err)
		}
	}
	// A keyed request's call stops at --call-limit: the response is cut
	// short, and stderr says why, as the proxy.
	if r, err := postErr(url+"/events", "ev-1", ""); err == nil && r.body == want.String() {
		t.Errorf("keyed POST of a %d ms stream through --call-limit 250ms: whole", parts*100)
	}
	code, log := stop()
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}
	named := false
	for _, line := range strings.Split(log, "\n") {
		named = named || strings.HasPrefix(line, "dedup proxy: ") && strings.Contains(line, "context deadline exceeded")
	}
	if !named {
		t.Errorf("stderr has no line of the proxy naming the cut upstream call:\n%s", log)
	}

	// Under a lease longer than the upstream waits, only the client's
	// hang-up can end the call.
	url, stop = runProxyInProcess(t, "--upstream", up.URL, "--state", t.TempDir(), "--lease", "1m")
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/hang", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("a GET whose client hung up: the upstream call ended with %v, want context.Canceled", err)
	}
	if code, log := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}
}

// TestProxyListenErrorNamesProxy: an address already in use fails the
// proxy with an error naming its command and flag.
func TestProxyListenErrorNamesProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	for _, tc := range []struct{ flag, listen, metrics string }{
		{"listen", busy, ""},
		{"metrics", "127.0.0.1:0", busy},
	} {
		var stderr strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr}
		args := []string{"proxy", "--listen", tc.listen, "--upstream", "http://h", "--state", t.TempDir()}
		if tc.metrics != "" {
			args = append(args, "--metrics", tc.metrics)
		}
		code := run(e, args)
		want := fmt.Sprintf("dedup: proxy: --%s %q: ", tc.flag, busy)
		if code == 0 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "address already in use") {
			t.Fatalf("exit %d, stderr %q; want an error starting %q", code, stderr.String(), want)
		}
	}
}

// TestProxyTimeoutNamesLease: a keyed request whose upstream does not
// answer within --lease gets 504 titled as a timeout, not as an
// unreachable upstream, and stderr names the limit that cut the call.
func TestProxyTimeoutNamesLease(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then net/http sees the proxy hang up
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer up.Close()
	url, stop := runProxyInProcess(t, "--upstream", up.URL, "--state", t.TempDir(), "--timeout", "200ms", "--call-limit", "400ms")
	r := post(t, url+"/charges", "slow-1", "{}")
	if r.status != http.StatusGatewayTimeout || !strings.Contains(r.body, `"title":"Upstream timed out"`) {
		t.Errorf("got %d %q, want 504 titled Upstream timed out", r.status, r.body)
	}
	code, log := stop()
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}
	if !strings.Contains(log, "upstream POST /charges failed, answered 504: no response within --timeout 200ms") {
		t.Errorf("stderr does not name --timeout as the limit:\n%s", log)
	}
}

// TestProxyLeaseWithinAdoptedWindow: a state created with a short window
// refuses a proxy whose --lease outlasts it, naming the state's window: a
// claim leaves with the window, so after a crash a retry past the window
// would run again within the lease.
func TestProxyLeaseWithinAdoptedWindow(t *testing.T) {
	dir := t.TempDir()
	eng, err := dedup.Open(dedup.Options{Dir: dir, Window: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	// A proxy that starts in spite of the lease stops at once.
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, sigs: sigs}
	code := run(e, []string{"proxy", "--listen", "127.0.0.1:0", "--upstream", "http://h", "--state", dir})
	want := "proxy: --lease 30s is longer than --window 4s (the state's)"
	if code != exitBad || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, %q; want exit 2 naming %q", code, stderr.String(), want)
	}
}
