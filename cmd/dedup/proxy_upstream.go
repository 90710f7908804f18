package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup/idempotency"
)

// upstreamLimits bound a keyed request's upstream call: the client gets
// 504 after timeout if no answer has begun; the call goes on up to
// callLimit; a late answer of at most maxBody bytes is stored.
type upstreamLimits struct {
	timeout, callLimit time.Duration
	maxBody            int
}

// upstreamProblem writes the proxy's own problem+json answer.
func upstreamProblem(w http.ResponseWriter, status int, title string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, "{\"type\":%q,\"title\":%q,\"status\":%d}\n", idempotency.ProblemType(title), title, status)
}

// callState is what the proxy learns of a keyed request's upstream call.
type callState struct {
	sent    atomic.Bool // the request's headers were written to the upstream
	unknown atomic.Bool // the call failed after sent: the upstream may have done the work
}

type callStateKey struct{}

// newUpstreamProxy forwards requests to up. The call of a keyed request
// does not follow the client: a client that hangs up does not cut a write
// short whose response is to be stored. A keyed call with no answer begun
// after lim.timeout gets 504 while the call goes on (idempotency.Defer):
// the key stays claimed, renewed, until the upstream answers (its answer
// is stored for the retry) or lim.callLimit cuts it off. A call that fails
// after its request was sent (a connection broken) gets 502, and its key
// stays in progress until its lease passes: the upstream may have done the
// work, and a retry must not do it twice. Every other request (a GET, a
// POST without a key) is a plain proxied call: it ends when its client
// hangs up, and it has no time limit, so event streams and downloads go
// on as long as the upstream sends.
func newUpstreamProxy(up *url.URL, lim upstreamLimits, keyed func(*http.Request) bool, pm *proxyMetrics, errs *upstreamErrors) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(up)
			r.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status, title := http.StatusBadGateway, "Upstream unavailable"
			if st, _ := r.Context().Value(callStateKey{}).(*callState); st != nil && st.sent.Load() {
				st.unknown.Store(true)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// Only a keyed call has a deadline: --call-limit.
				status, title = http.StatusGatewayTimeout, "Upstream timed out"
				err = fmt.Errorf("no response within --call-limit %v: %w", lim.callLimit, err)
			}
			errs.log(r, status, err)
			upstreamProblem(w, status, title)
		},
		// FlushInterval 0: responses are buffered as net/http does;
		// streamed ones (unknown length, event streams) are flushed as
		// they come.
		Transport:  upstreamTransport(),
		BufferPool: copyBuffers{},
		// A call cut off mid-response (by --call-limit, or by the
		// upstream) is told on stderr as the proxy's other failures are.
		ErrorLog: log.New(logfWriter(errs.logf), "", 0),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { pm.upstream.Observe(time.Since(start).Seconds()) }()
		if !keyed(r) {
			rp.ServeHTTP(w, r)
			return
		}
		st := &callState{}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), lim.callLimit)
		ctx = context.WithValue(ctx, callStateKey{}, st)
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { st.sent.Store(true) }})
		sw := &switchWriter{w: w, h: http.Header{}, max: lim.maxBody}
		done := make(chan struct{})
		var panicked any
		go func() {
			defer close(done)
			defer cancel()
			defer func() { panicked = recover() }()
			rp.ServeHTTP(sw, r.WithContext(ctx))
		}()
		t := time.NewTimer(lim.timeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			if sw.detach() {
				end := idempotency.Defer(r)
				errs.log(r, http.StatusGatewayTimeout, fmt.Errorf("no response within --timeout %v; the call goes on, its key claimed", lim.timeout))
				upstreamProblem(w, http.StatusGatewayTimeout, "Upstream timed out")
				go func() {
					<-done
					if status, h, body := sw.late(); panicked == nil && !st.unknown.Load() && status > 0 {
						end(status, h, body)
					} else {
						end(0, nil, nil)
					}
				}()
				return
			}
			<-done // the answer has begun: it goes on to the client
		}
		if panicked != nil {
			if st.sent.Load() {
				if end := idempotency.Defer(r); end != nil {
					end(0, nil, nil)
				}
			}
			panic(panicked)
		}
		if st.unknown.Load() {
			if end := idempotency.Defer(r); end != nil {
				end(0, nil, nil)
			}
		}
	})
}

// switchWriter passes a keyed call's response on to the client until
// detach, after which it keeps the response (up to max body bytes) for
// late. Its own header map is copied to the client's at WriteHeader, so
// that a response detached before its status keeps nothing of it in the
// client's answer.
type switchWriter struct {
	w        http.ResponseWriter
	h        http.Header
	max      int
	mu       sync.Mutex
	started  bool
	detached bool
	status   int
	body     []byte
	over     bool
}

func (s *switchWriter) Header() http.Header { return s.h }

func (s *switchWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		if code >= 200 && s.status == 0 {
			s.status = code
		}
		return
	}
	dst := s.w.Header()
	for k, v := range s.h {
		dst[k] = v
	}
	if code >= 200 {
		s.started = true
	}
	s.w.WriteHeader(code)
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	if !s.started && !s.detached {
		s.mu.Unlock()
		s.WriteHeader(http.StatusOK)
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.detached {
		if s.status == 0 {
			s.status = http.StatusOK
		}
		if len(s.body)+len(p) > s.max {
			s.over, s.body = true, nil
		} else if !s.over {
			s.body = append(s.body, p...)
		}
		return len(p), nil
	}
	return s.w.Write(p)
}

// FlushError flushes the client's response, for http.ResponseController.
func (s *switchWriter) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		return nil
	}
	return http.NewResponseController(s.w).Flush()
}

// detach stops passing the response on, unless it has begun.
func (s *switchWriter) detach() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return false
	}
	s.detached = true
	return true
}

// late returns the response kept after detach: status 0 if none, or one
// over max.
func (s *switchWriter) late() (int, http.Header, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		return 0, nil, nil
	}
	return s.status, s.h, s.body
}

// upstreamTransport is http.DefaultTransport keeping enough idle
// connections to the one upstream for every concurrent request (with the
// default two, a burst of concurrent requests opens and closes a
// connection for most of them), and passing the client's Accept-Encoding
// on as it is: it neither asks the upstream for gzip on its own nor
// decompresses, so the client gets (and a replay repeats) the encoding it
// asked for, with its Content-Length.
func upstreamTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.DisableCompression = true
	return inMemoryBodies{t}
}

// inMemoryBodies sends a request whose body the middleware holds in
// memory (it sets GetBody) with a fresh copy from GetBody. ReverseProxy
// wraps the body it forwards in a reader the transport does not know, and
// the transport then writes the headers and the body in two writes (two
// packets); a body it knows to be in memory goes out with the headers.
type inMemoryBodies struct{ http.RoundTripper }

func (t inMemoryBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.GetBody != nil && r.Body != nil && r.Body != http.NoBody {
		if b, err := r.GetBody(); err == nil {
			orig := r.Body
			r2 := *r
			r2.Body = b
			res, err := t.RoundTripper.RoundTrip(&r2)
			orig.Close()
			return res, err
		}
	}
	return t.RoundTripper.RoundTrip(r)
}

// upstreamErrors logs the upstream calls that failed (the client got 502
// or 504): the first at once, then at most one a second with the count of
// those not logged, so that an upstream that is down says why without
// flooding stderr.
type upstreamErrors struct {
	logf    func(format string, args ...any)
	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (u *upstreamErrors) log(r *http.Request, status int, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	if now.Sub(u.last) < time.Second {
		u.skipped++
		return
	}
	more := ""
	if u.skipped > 0 {
		more = fmt.Sprintf(" (and %d more failed calls since the last line)", u.skipped)
	}
	u.last, u.skipped = now, 0
	u.logf("upstream %s %s failed, answered %d: %v%s", r.Method, r.URL.Path, status, err, more)
}

// logfWriter writes each line given to it through a printf-like function.
type logfWriter func(format string, args ...any)

func (f logfWriter) Write(p []byte) (int, error) {
	f("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// copyBuffers lends ReverseProxy the buffers it copies response bodies
// through; without a pool it allocates 32 KiB per request.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().(*[32 << 10]byte)[:] }

func (copyBuffers) Put(b []byte) { copyBufferPool.Put((*[32 << 10]byte)(b)) }
