package main

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProxiesShareOneServe: three proxies with --store on one dedup
// serve behind a round-robin: one upstream run per key whatever proxy
// each request reaches, 409 at every proxy while it runs, the replay and
// the 422 at proxies that never saw the key, 503 (never a run) while the
// serve is down, and the replays again once it is back on its state.
func TestProxiesShareOneServe(t *testing.T) {
	up := newUpstreamAPI(t)
	state := t.TempDir()
	addr, stopServe := serveInProcess(t, "--state", state)
	store := "redis://" + addr
	var proxies []string
	for i := 0; i < 3; i++ {
		url, stop := runProxyInProcess(t, "--upstream", up.srv.URL, "--store", store, "--table", "orders")
		defer stop()
		proxies = append(proxies, url)
	}
	release := up.holdKey("o-1")
	first := make(chan proxyResponse, 1)
	go func() { first <- post(t, proxies[0]+"/orders", "o-1", `{"n":1}`) }()
	<-up.arrived
	var wg sync.WaitGroup
	for i := 0; i < 9; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := postErr(proxies[i%3]+"/orders", "o-1", `{"n":1}`); err != nil || r.status != http.StatusConflict {
				t.Errorf("proxy %d while o-1 runs: %+v, %v", i%3, r, err)
			}
		}()
	}
	wg.Wait()
	close(release)
	f := <-first
	if f.status != 201 {
		t.Fatalf("first: %+v", f)
	}
	for i, p := range proxies {
		if r := post(t, p+"/orders", "o-1", `{"n":1}`); r.body != f.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("proxy %d replay: %+v", i, r)
		}
		if r := post(t, p+"/orders", "o-1", `{"n":2}`); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("proxy %d, another body: %+v", i, r)
		}
	}
	if n := up.runsOf("o-1"); n != 1 {
		t.Fatalf("o-1 ran %d times across the proxies", n)
	}
	if code, log := stopServe(); code != 0 {
		t.Fatalf("serve exit %d\n%s", code, log)
	}
	for i, p := range proxies {
		if r := post(t, p+"/orders", "o-2", ""); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("proxy %d, serve down: %+v", i, r)
		}
	}
	if n := up.runsOf("o-2"); n != 0 {
		t.Fatalf("o-2 ran %d times with the serve down", n)
	}
	_, stopServe = serveInProcess(t, "--state", state, "--listen", addr)
	defer stopServe()
	for i, p := range proxies {
		var r proxyResponse
		for try := 0; try < 50; try++ {
			if r = post(t, p+"/orders", "o-1", `{"n":1}`); r.status != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r.body != f.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("proxy %d after the serve's restart: %+v", i, r)
		}
	}
	if r := post(t, proxies[2]+"/orders", "o-2", ""); r.status != 201 || up.runsOf("o-2") != 1 {
		t.Fatalf("o-2 after the restart: %+v", r)
	}
}

// TestProxyStoreStatus: --store-status stores the statuses it lists (a
// 503 here) instead of releasing them; bad lists are refused.
func TestProxyStoreStatus(t *testing.T) {
	up := newUpstreamAPI(t)
	url, stop := runProxyInProcess(t, "--upstream", up.srv.URL, "--state", t.TempDir(), "--store-status", "2xx,4xx,503")
	defer stop()
	for i := 0; i < 2; i++ {
		if r := post(t, url+"/fail", "f", ""); r.status != 503 || up.runsOf("f") != 1 {
			t.Fatalf("attempt %d: %+v, %d runs", i, r, up.runsOf("f"))
		}
	}
	if _, err := parseStoreStatus("2xx,abc"); err == nil || !strings.Contains(err.Error(), `"abc"`) {
		t.Fatalf("a bad --store-status: %v", err)
	}
	f, _ := parseStoreStatus("2xx,500")
	if !f(201) || !f(500) || f(502) || f(404) {
		t.Fatal("2xx,500")
	}
}
