package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// sessionAPI answers each run with a body and a Set-Cookie naming the
// Authorization it came with, and counts the runs.
type sessionAPI struct {
	mu   sync.Mutex
	runs int
	srv  *httptest.Server
}

func newSessionAPI(t *testing.T) *sessionAPI {
	a := &sessionAPI{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.runs++
		n := a.runs
		a.mu.Unlock()
		who := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
		w.Header().Set("Set-Cookie", "session="+strings.ReplaceAll(who, " ", "_"))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d for %q: %s", n, who, body)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *sessionAPI) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs
}

// rawPost sends a POST as curl would, byte for byte on a connection of
// its own, and reads the response with http.ReadResponse.
func rawPost(t *testing.T, url string, headers []string, body string) proxyResponse {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "POST /charges HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	req += fmt.Sprintf("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return proxyResponse{res.StatusCode, res.Header, string(b)}
}

// clientPost sends a POST with Go's http.Client.
func clientPost(t *testing.T, url string, headers map[string]string, body string) proxyResponse {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return proxyResponse{res.StatusCode, res.Header, string(b)}
}

// TestProxyScopesKeysByAuthorization: by default a key is scoped by the
// request's Authorization. Bob, sending Alice's key with his own
// credentials, never gets Alice's stored body or Set-Cookie, nor a 422 for
// another body: he gets a run of his own, replayed to him alone.
func TestProxyScopesKeysByAuthorization(t *testing.T) {
	api := newSessionAPI(t)
	url, stop := runProxyInProcess(t, "--upstream", api.srv.URL, "--state", t.TempDir())
	defer stop()
	alice := []string{"Authorization: Bearer alice-token", "Idempotency-Key: 1"}
	a := rawPost(t, url, alice, "amount=100")
	if a.status != 201 || !strings.Contains(a.header.Get("Set-Cookie"), "alice") {
		t.Fatalf("alice: %+v", a)
	}
	for _, b := range []proxyResponse{
		rawPost(t, url, []string{"Authorization: Bearer bob-token", "Idempotency-Key: 1"}, "amount=100"),
		clientPost(t, url, map[string]string{"Authorization": "Bearer bob-token", "Idempotency-Key": "1"}, "amount=100"),
	} {
		if strings.Contains(b.body, "alice") || strings.Contains(b.header.Get("Set-Cookie"), "alice") {
			t.Fatalf("bob got alice's response: %+v", b)
		}
		if b.status != 201 || !strings.Contains(b.header.Get("Set-Cookie"), "bob") {
			t.Fatalf("bob: %+v", b)
		}
	}
	if n := api.count(); n != 2 {
		t.Fatalf("%d upstream runs, want 2 (alice's, bob's replayed to him)", n)
	}
	// Another body under Bob's credentials is his key's mismatch, not
	// a view on whether Alice used the key.
	if b := clientPost(t, url, map[string]string{"Authorization": "Basic Ym9iOnB3", "Idempotency-Key": "1"}, "amount=999"); b.status != 201 || strings.Contains(b.body, "alice") {
		t.Fatalf("a third client, another body: %+v", b)
	}
	again := clientPost(t, url, map[string]string{"Authorization": "Bearer alice-token", "Idempotency-Key": "1"}, "amount=100")
	if again.body != a.body || again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Set-Cookie") != a.header.Get("Set-Cookie") {
		t.Fatalf("alice's replay: %+v, first %+v", again, a)
	}
	// No credentials: a namespace of its own, shared by such requests.
	anon := clientPost(t, url, map[string]string{"Idempotency-Key": "1"}, "amount=100")
	if anon.status != 201 || strings.Contains(anon.body, "alice") || strings.Contains(anon.body, "bob") || api.count() != 4 {
		t.Fatalf("no Authorization: %+v, %d runs", anon, api.count())
	}
}

// TestProxyScopeHeaderFlags: --scope-header names the headers to scope by
// (repeatable), none shares one namespace, --min-key-length refuses short
// keys.
func TestProxyScopeHeaderFlags(t *testing.T) {
	api := newSessionAPI(t)
	url, stop := runProxyInProcess(t, "--upstream", api.srv.URL, "--state", t.TempDir(),
		"--scope-header", "X-Api-Key", "--scope-header", "X-Tenant", "--min-key-length", "8")
	if r := clientPost(t, url, map[string]string{"X-Api-Key": "k1", "Idempotency-Key": "short"}, ""); r.status != 400 || !strings.Contains(r.body, "at least 8") {
		t.Fatalf("a 5-byte key under --min-key-length 8: %+v", r)
	}
	k := "key-00000001"
	a := clientPost(t, url, map[string]string{"X-Api-Key": "alice", "Idempotency-Key": k}, "")
	b := clientPost(t, url, map[string]string{"X-Api-Key": "bob", "Idempotency-Key": k}, "")
	c := clientPost(t, url, map[string]string{"X-Api-Key": "bob", "X-Tenant": "t2", "Idempotency-Key": k}, "")
	if a.body == b.body || b.body == c.body || api.count() != 3 {
		t.Fatalf("scoped by X-Api-Key and X-Tenant: %q %q %q, %d runs", a.body, b.body, c.body, api.count())
	}
	// Authorization is not among the scope headers now.
	d := clientPost(t, url, map[string]string{"X-Api-Key": "alice", "Authorization": "Bearer x", "Idempotency-Key": k}, "")
	if d.body != a.body || d.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same X-Api-Key, another Authorization: %+v", d)
	}
	stop()

	url, stop = runProxyInProcess(t, "--upstream", api.srv.URL, "--state", t.TempDir(), "--scope-header", "none")
	defer stop()
	a = clientPost(t, url, map[string]string{"Authorization": "Bearer alice", "Idempotency-Key": "1"}, "")
	b = clientPost(t, url, map[string]string{"Authorization": "Bearer bob", "Idempotency-Key": "1"}, "")
	if b.body != a.body || b.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("--scope-header none: one namespace: %+v, %+v", a, b)
	}
}
