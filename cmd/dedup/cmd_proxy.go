package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/idempotency"
)

// proxyConfig holds the flags of `dedup proxy`.
type proxyConfig struct {
	listen         string
	upstream       string
	state          string
	window         time.Duration
	rate           float64
	lease          time.Duration
	wait           time.Duration
	requireKey     bool
	maxBody        byteSize
	maxRequestBody byteSize
	maxMemory      byteSize
	header         string
	methods        string
	metrics        string
	drain          time.Duration
	scopeHeaders   stringList
	minKeyLength   int
	store          string
	table          string
	storeStatus    string
	timeout        time.Duration
	callLimit      time.Duration
}

const proxyHelpHead = `Usage: dedup proxy --upstream URL (--state DIR | --store redis://HOST:PORT) [--listen ADDR] [flags]

Put idempotency keys in front of any HTTP API: the first request with a key
(header Idempotency-Key) goes to the upstream; its response is stored, and
every repeat of the key within --window gets the stored response (with
Idempotent-Replayed: true) without reaching the upstream. While the first
request runs, a repeat gets 409 with Retry-After (or waits, --wait); the key
sent with another method, path or body gets 422. 5xx and 429 responses are
not stored (--store-status): the key is released and a retry goes upstream
again. Keys are scoped by the request's Authorization (--scope-header): a
client never gets another's stored response. The key is forwarded
upstream unchanged. With --store, any number of proxies share one dedup
serve table: one upstream run per key across them all.

Flags:
`

const proxyHelpTail = `
A key's claim is on disk (fsynced) before its request goes upstream: after
a crash of the proxy (kill -9), a retry within --lease gets 409, never a
second upstream call; after the lease it goes upstream again. While a
request runs, the proxy renews its lease: an upstream slower than --lease
still runs once. A keyed call with no answer after --timeout gets 504; the
call goes on (up to --call-limit), the key claimed, and its answer is
stored for the retry. A call broken after its request was sent gets 502
and its key stays in progress until its lease passes (the upstream may
have done the work). Other requests, GET event streams too, have no limit.
SIGTERM or SIGINT: stop accepting, let the requests in flight finish (up to
--drain), then exit; a request still unfinished keeps its claim until its
lease ends.

Examples:
  dedup proxy --upstream http://127.0.0.1:3000 --state ./idem
  curl -X POST -H 'Idempotency-Key: 8e03978e' -d '{"amount":100}' localhost:8080/charges
`

func newProxyFlags(e *env) (*flag.FlagSet, *proxyConfig) {
	c := &proxyConfig{maxBody: byteSize(min(1<<20, dedup.MaxResultSize-4096)), maxRequestBody: 10 << 20}
	fs := newFlags(e, "dedup proxy", proxyHelpHead, proxyHelpTail)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "listen on `ADDR` (host:port; the default is loopback only)")
	fs.StringVar(&c.upstream, "upstream", "", "the API to protect, an http:// or https:// `URL` (required)")
	fs.StringVar(&c.state, "state", "", "state `DIR` holding the keys and stored responses (this or --store is required)")
	fs.StringVar(&c.store, "store", "", "keep the keys and stored responses on a dedup serve at `URL` (redis://[:password@]host:port, rediss:// for TLS), shared by every proxy given it, instead of --state")
	fs.StringVar(&c.table, "table", "idempotency", "the dedup serve table of --store, `NAME`")
	fs.StringVar(&c.storeStatus, "store-status", "", "store responses whose status is in `LIST` (comma-separated: 201, 2xx, 4xx...; default every status below 500 but 429); the others are released and run again on a retry")
	fs.DurationVar(&c.window, "window", 24*time.Hour, "keep a key and its response for `DURATION`")
	fs.Float64Var(&c.rate, "rate", engineDefaults.ExpectedRate, "expected distinct keys per second, `N` (filter sizing)")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "a key stays in progress for `DURATION` at most once the proxy that runs its request is gone (the proxy renews it while the request runs)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "a keyed request whose upstream has not begun to answer after `DURATION` gets 504; its call goes on, the key claimed, and its response is stored for the retry")
	fs.DurationVar(&c.callLimit, "call-limit", 10*time.Minute, "cut a keyed request's upstream call off after `DURATION`; its key then stays in progress until its lease passes (the upstream may have done the work)")
	fs.DurationVar(&c.wait, "wait", 0, "a repeat of a key in progress waits up to `DURATION` for the response instead of getting 409")
	fs.BoolVar(&c.requireKey, "require-key", false, "answer 400 to a request of --methods without a key (default: send it upstream as is)")
	fs.Var(&c.maxBody, "max-body", "store responses of at most `SIZE` (bytes, or with KiB, MiB); a larger one is sent, not stored")
	fs.Var(&c.maxRequestBody, "max-request-body", "refuse (413) a keyed request with a body over `SIZE`")
	fs.Var(&c.maxMemory, "max-memory", "hold at most `SIZE` of request bodies and responses at once: a keyed request over it gets 503, a response over it is sent, not stored (default 256MiB, or --max-request-body + --max-body if more)")
	fs.StringVar(&c.header, "header", "Idempotency-Key", "the request header carrying the key, `NAME`")
	fs.StringVar(&c.methods, "methods", "POST,PATCH", "the methods that take keys, comma-separated `LIST`")
	fs.Var(&c.scopeHeaders, "scope-header", "keep apart the keys of requests that differ in header `NAME` (repeatable; its values are hashed into the stored key); default Authorization, \"none\" shares one namespace among all clients")
	fs.IntVar(&c.minKeyLength, "min-key-length", 1, "refuse (400) a key shorter than `N` bytes")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (e.g. 127.0.0.1:9090) at /metrics")
	fs.DurationVar(&c.drain, "drain", time.Minute, "on SIGTERM, wait up to `DURATION` for the requests in flight")
	return fs, c
}

// byteSize is a flag of a size in bytes: "1048576", "512KiB", "1MiB".
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	num := s
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || n > (1<<62)/mult {
		return fmt.Errorf("want a positive number of bytes, optionally with B, KiB, MiB or GiB, got %q", s)
	}
	*b = byteSize(n * mult)
	return nil
}

func runProxy(e *env, args []string) error {
	fs, c := newProxyFlags(e)
	if _, err := positionals(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if c.upstream == "" {
		return usagef("proxy: --upstream URL is required")
	}
	up, err := url.Parse(c.upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return usagef("proxy: --upstream %q: want an http:// or https:// URL with a host", c.upstream)
	}
	switch {
	case c.state == "" && c.store == "":
		return usagef("proxy: --state DIR or --store URL is required: the keys' claims must survive a crash")
	case c.state != "" && c.store != "":
		return usagef("proxy: --state and --store are exclusive: the keys live in one place")
	}
	var storeOpts *redis.Options
	if c.store != "" {
		if storeOpts, err = redis.ParseURL(c.store); err != nil {
			return usagef("proxy: --store %q: %v", c.store, err)
		}
		q, _ := url.Parse(c.store)
		if q != nil && !q.Query().Has("dialer_retries") {
			// A store that is down answers 503 at once, not after five
			// dials.
			storeOpts.DialerRetries = 1
		}
		if q != nil && !q.Query().Has("pool_size") {
			storeOpts.PoolSize = 256
		}
		if q != nil && !q.Query().Has("max_retries") {
			// A command is not sent twice: a BEGIN answered but lost
			// would leave the key in progress until its lease.
			storeOpts.MaxRetries = -1
		}
		if c.table == "" {
			return usagef("proxy: --table must name a table, got %q", c.table)
		}
	}
	storable, err := parseStoreStatus(c.storeStatus)
	if err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"lease", c.lease}, {"window", c.window}, {"drain", c.drain}, {"timeout", c.timeout}, {"call-limit", c.callLimit}} {
		if d.v <= 0 {
			return usagef("proxy: --%s must be positive, got %v", d.name, d.v)
		}
	}
	if c.header == "" {
		// The middleware reads an empty Header as its default; an
		// explicit --header '' is a mistake, not a request for it.
		return usagef("proxy: --header must name a header, got %q", c.header)
	}
	if c.wait < 0 {
		return usagef("proxy: --wait must not be negative, got %v", c.wait)
	}
	if int64(c.maxBody) > dedup.MaxResultSize-4096 {
		return usagef("proxy: --max-body is at most %d bytes (a stored response holds its headers too), got %d", dedup.MaxResultSize-4096, c.maxBody)
	}
	if err := checkAddr("--listen", c.listen); err != nil {
		return err
	}
	if c.metrics != "" {
		if err := checkAddr("--metrics", c.metrics); err != nil {
			return err
		}
	}
	scope, err := proxyScope(c.scopeHeaders)
	if err != nil {
		return err
	}
	if c.minKeyLength < 1 {
		return usagef("proxy: --min-key-length must be at least 1, got %d", c.minKeyLength)
	}
	var methods []string
	for _, m := range strings.Split(c.methods, ",") {
		methods = append(methods, strings.ToUpper(strings.TrimSpace(m)))
	}
	opts := dedup.Options{Dir: c.state, Window: c.window, ExpectedRate: c.rate, Logf: engineLog(e)}
	explicit := explicitFlags(fs)
	// An explicit --rate 0 is a mistake, not a request for the default.
	if err := checkOptions(opts, explicit); err != nil {
		return err
	}
	if c.state != "" {
		if err := adoptState(c.state, explicit, &opts); err != nil {
			return err
		}
	}
	if c.state != "" && c.lease > opts.Window {
		// A claim leaves with its key's window: after a crash, a retry
		// past the window would run again, however long the lease.
		whose := ""
		if !explicit["window"] {
			whose = " (the state's)"
		}
		return usagef("proxy: --lease %v is longer than --window %v%s: after a crash a claim would leave with the window before its lease ends, and a retry would run again", c.lease, opts.Window, whose)
	}
	pm := newProxyMetrics()
	mwOpts := idempotency.Options{
		Header:         c.header,
		Methods:        methods,
		RequireKey:     c.requireKey,
		MinKeyLength:   c.minKeyLength,
		Scope:          scope,
		Storable:       storable,
		Lease:          c.lease,
		Wait:           c.wait,
		MaxBody:        int(c.maxBody),
		MaxRequestBody: int64(c.maxRequestBody),
		MaxMemory:      int64(c.maxMemory),
		Report:         pm.report,
		ErrorLog: func(format string, args ...any) {
			fmt.Fprintf(e.stderr, "dedup proxy: "+format+"\n", args...)
		},
	}
	// Check the middleware's options before anything is opened.
	mwOpts.Store = (*dedup.Engine)(nil)
	if err := mwOpts.Validate(); err != nil {
		// The flags are checked above but for these, which Validate names
		// by their Options fields: a user of the command sees flags.
		return usageErr(fmt.Errorf("proxy: %s", middlewareFlagWords.Replace(err.Error())))
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return listenErr("proxy", "listen", c.listen, err)
	}
	var eng *dedup.Engine
	var closeStore func() error
	where := "state " + c.state
	if storeOpts != nil {
		client := redis.NewClient(storeOpts)
		closeStore = client.Close
		mwOpts.Store = idempotency.NewRESPStore(client, c.table)
		where = fmt.Sprintf("store %s table %s", redactURL(c.store), c.table)
	} else {
		if eng, err = dedup.Open(opts); err != nil {
			ln.Close()
			return openErr(c.state, err)
		}
		closeStore = eng.Close
		mwOpts.Store = eng
	}
	mw, err := idempotency.New(mwOpts)
	if err != nil {
		return errors.Join(usageErr(err), ln.Close(), closeStore())
	}
	handler := mw(newUpstreamProxy(up, upstreamLimits{timeout: c.timeout, callLimit: c.callLimit, maxBody: int(c.maxBody)}, keyedBy(methods, c.header), pm, &upstreamErrors{logf: mwOpts.ErrorLog}))
	stopMetrics := func() error { return nil }
	if c.metrics != "" {
		cs := []prometheus.Collector{pm}
		if eng != nil {
			cs = append(cs, newCollector(eng, nil))
		}
		reg, err := newRegistry(cs...)
		if err != nil {
			return errors.Join(err, ln.Close(), closeStore())
		}
		mln, err := net.Listen("tcp", c.metrics)
		if err != nil {
			return errors.Join(listenErr("proxy", "metrics", c.metrics, err), ln.Close(), closeStore())
		}
		stopMetrics = serveRegistry(mln, reg)
	}
	if host, _, _ := net.SplitHostPort(c.listen); !isLoopback(host) {
		fmt.Fprintf(e.stderr, "dedup proxy: warning: --listen %s is not loopback: anyone who reaches it reaches the upstream through it\n", c.listen)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	window := opts.Window.String()
	if eng == nil {
		window = "the table's"
	}
	fmt.Fprintf(e.stderr, "dedup proxy: listening on %s (upstream %s, window %s, lease %v, %s)\n", ln.Addr(), up, window, c.lease, where)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-e.sigs:
		fmt.Fprintf(e.stderr, "dedup proxy: shutting down: waiting up to %v for the requests in flight\n", c.drain)
		ctx, cancel := context.WithTimeout(context.Background(), c.drain)
		if err := srv.Shutdown(ctx); err != nil {
			fmt.Fprintf(e.stderr, "dedup proxy: requests still in flight after --drain %v keep their claims until their lease ends\n", c.drain)
			srv.Close()
		}
		cancel()
		serveErr = <-served
	case serveErr = <-served:
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, stopMetrics(), closeStore())
}

// redactURL is the --store URL without its password, for stderr.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// parseStoreStatus reads --store-status: statuses (201) and classes
// (2xx), comma-separated; "" is the middleware's default (nil).
func parseStoreStatus(list string) (func(int) bool, error) {
	if list == "" {
		return nil, nil
	}
	var exact [1000]bool
	var class [10]bool
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if len(f) == 3 && f[0] >= '1' && f[0] <= '9' && strings.EqualFold(f[1:], "xx") {
			class[f[0]-'0'] = true
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 100 || n > 999 || len(f) != 3 {
			return nil, usagef("proxy: --store-status holds %q: want a status (201) or a class (2xx), comma-separated", f)
		}
		exact[n] = true
	}
	return func(status int) bool {
		return status >= 100 && status <= 999 && (exact[status] || class[status/100])
	}, nil
}

// proxyScope returns the middleware's Scope for the --scope-header
// values: Authorization when none is given, nil for "none".
func proxyScope(names []string) (func(*http.Request) string, error) {
	if len(names) == 0 {
		names = []string{"Authorization"}
	}
	for _, n := range names {
		if strings.EqualFold(n, "none") {
			if len(names) > 1 {
				return nil, usagef("proxy: --scope-header none turns scoping off; it cannot go with other --scope-header values, got %q", strings.Join(names, ", "))
			}
			return nil, nil
		}
		if !httpToken(n) {
			return nil, usagef("proxy: --scope-header must name a header, got %q", n)
		}
	}
	return idempotency.ScopeByHeaders(names...), nil
}

// httpToken reports whether s is an HTTP token, as a header name is.
func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// middlewareFlagWords rewrites the names of the idempotency.Options fields
// the proxy's flags set into those flags, on one line.
var middlewareFlagWords = strings.NewReplacer("idempotency: Header ", "--header ", "idempotency: Methods ", "--methods ",
	"idempotency: MaxMemory ", "--max-memory ",
	"idempotency: MinKeyLength ", "--min-key-length ", "MaxKeyLength", "the longest key", "MaxRequestBody + MaxBody", "--max-request-body + --max-body", "\n", "; ")

// keyedBy reports whether a request the middleware passes on carries a key
// of header with one of methods: the middleware passes such a request on
// only once it has claimed the key, so its response is to be stored.
func keyedBy(methods []string, header string) func(*http.Request) bool {
	set := map[string]bool{}
	for _, m := range methods {
		set[m] = true
	}
	header = textproto.CanonicalMIMEHeaderKey(header)
	return func(r *http.Request) bool {
		_, ok := r.Header[header]
		return ok && set[r.Method]
	}
}

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

func (copyBuffers) Get() []byte  { return copyBufferPool.Get().(*[32 << 10]byte)[:] }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put((*[32 << 10]byte)(b)) }

// proxyMetrics are the proxy's own metrics.
type proxyMetrics struct {
	outcomes *prometheus.CounterVec
	// byOutcome holds the counter of each outcome, resolved once: a
	// lookup by label per request costs a hash of the label and a lock.
	byOutcome [outcomeCount]prometheus.Counter
	stored    prometheus.Counter
	upstream  prometheus.Histogram
}

func newProxyMetrics() *proxyMetrics {
	m := &proxyMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_proxy_requests_total",
			Help: "Requests by outcome: executed (sent upstream, response stored), replayed, conflict (409), mismatch (422), released (sent upstream, not stored: 5xx, 429, too large), rejected (400, 413), failed (503: the store failed), overloaded (503: over --max-memory), deferred (504 after --timeout or 502 after a broken call, the key kept claimed), unkeyed (sent upstream without a key).",
		}, []string{"outcome"}),
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dedup_proxy_stored_bytes_total",
			Help: "Bytes of responses stored (status, headers, body).",
		}),
		upstream: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dedup_proxy_upstream_seconds",
			Help:    "Latency of upstream calls.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	for o := idempotency.Unkeyed; int(o) < outcomeCount; o++ {
		m.byOutcome[o] = m.outcomes.WithLabelValues(o.String())
	}
	return m
}

// outcomeCount bounds the idempotency.Outcome values (they start at 1).
const outcomeCount = int(idempotency.Deferred) + 1

func (m *proxyMetrics) report(_ *http.Request, o idempotency.Outcome, stored int) {
	if int(o) < outcomeCount && m.byOutcome[o] != nil {
		m.byOutcome[o].Inc()
	} else {
		m.outcomes.WithLabelValues(o.String()).Inc()
	}
	if stored > 0 {
		m.stored.Add(float64(stored))
	}
}

// Describe and Collect make proxyMetrics one prometheus.Collector.
func (m *proxyMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.outcomes.Describe(ch)
	m.stored.Describe(ch)
	m.upstream.Describe(ch)
}

func (m *proxyMetrics) Collect(ch chan<- prometheus.Metric) {
	m.outcomes.Collect(ch)
	m.stored.Collect(ch)
	m.upstream.Collect(ch)
}
