package idempotency

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
)

// renewer keeps a claim alive while its request runs: every third of the
// lease it renews the lease, so that a request slower than the lease is
// not taken for a crashed one and run a second time. The lease then
// bounds only how long the key stays in progress once this process (or
// its connection to the store) is gone.
type renewer struct {
	m       *middleware
	key     []byte
	tok     dedup.Token
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func (m *middleware) startRenewing(key []byte, tok dedup.Token) *renewer {
	rn := &renewer{m: m, key: key, tok: tok}
	rn.mu.Lock() // renew reads rn.t
	rn.t = time.AfterFunc(m.o.Lease/3, rn.renew)
	rn.mu.Unlock()
	return rn
}

func (rn *renewer) renew() {
	ctx, cancel := context.WithTimeout(context.Background(), rn.m.o.Lease/3)
	err := rn.m.o.Store.Renew(ctx, rn.key, rn.tok, rn.m.o.Lease)
	cancel()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stopped {
		return
	}
	if errors.Is(err, dedup.ErrLeaseLost) {
		// Another request claimed the key after a lease that lapsed
		// (the store was out of reach longer than the lease): nothing
		// left to renew.
		rn.m.o.ErrorLog("idempotency: renew %q: %v", rn.key, err)
		rn.stopped = true
		return
	}
	next := rn.m.o.Lease / 3
	if err != nil {
		// Tried again soon: the lease still holds for a while.
		rn.m.o.ErrorLog("idempotency: renew %q: %v", rn.key, err)
		next = min(next, time.Second)
	}
	rn.t.Reset(next)
}

// stop ends the renewals; a renewal under way may still land.
func (rn *renewer) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.t.Stop()
	rn.mu.Unlock()
}

// deferral is the state of [Defer] for one request.
type deferral struct {
	mu     sync.Mutex
	asked  bool
	result chan lateResult
}

type lateResult struct {
	status int
	header http.Header
	body   []byte
}

type deferKey struct{}

// Defer, called by a handler behind the middleware on the first request
// of a key, says that the key's work goes on after the handler returns
// (an upstream call that outlasts the time the client is given, say): the
// response the handler writes is sent and not stored, and the key stays in
// progress, its lease renewed, until end is called with the work's
// outcome. end(status, header, body) with a status stores that response
// for the key's repeats (if [Options.Storable] and within
// [Options.MaxBody]; else the key is released); end(0, nil, nil) says
// the outcome is unknown (the work may have happened): the key stays in
// progress until its lease passes, as after a crash. end is called once;
// later calls do nothing. Defer returns nil for a request that is not the
// first of a key under the middleware.
func Defer(r *http.Request) (end func(status int, header http.Header, body []byte)) {
	d, _ := r.Context().Value(deferKey{}).(*deferral)
	if d == nil {
		return nil
	}
	d.mu.Lock()
	d.asked = true
	d.mu.Unlock()
	var once sync.Once
	return func(status int, header http.Header, body []byte) {
		once.Do(func() { d.result <- lateResult{status, header, body} })
	}
}

func (d *deferral) deferred() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked
}

// finishDeferred waits for the outcome of a deferred key's work, renewing
// its claim meanwhile, then stores it, releases the key, or (an unknown
// outcome) leaves the claim to lapse.
func (m *middleware) finishDeferred(d *deferral, rn *renewer, key []byte, tok dedup.Token) {
	res := <-d.result
	rn.stop()
	ctx := context.Background()
	if res.status == 0 {
		m.o.ErrorLog("idempotency: the outcome of %q is unknown: it stays in progress until its lease passes", key)
		return
	}
	if m.o.Storable(res.status) && len(res.body) <= m.o.MaxBody {
		h := res.header
		if h == nil {
			h = http.Header{}
		}
		stored := append(m.appendHead(make([]byte, 0, headSize(h)+len(res.body)), res.status, h), res.body...)
		err := m.o.Store.Complete(ctx, key, tok, stored)
		if err == nil {
			return
		}
		m.o.ErrorLog("idempotency: store the late response of %q: %v", key, err)
	}
	if err := m.o.Store.Release(ctx, key, tok); err != nil && !errors.Is(err, dedup.ErrLeaseLost) {
		m.o.ErrorLog("idempotency: release %q: %v", key, err)
	}
}
