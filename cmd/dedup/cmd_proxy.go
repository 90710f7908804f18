package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
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
	storeOpts, err := proxyStoreOptions(c)
	if err != nil {
		return err
	}
	storable, err := parseStoreStatus(c.storeStatus)
	if err != nil {
		return err
	}
	if err := checkProxyFlags(c); err != nil {
		return err
	}
	scope, err := proxyScope(c.scopeHeaders)
	if err != nil {
		return err
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
	if err := checkLease(c, opts.Window, explicit["window"]); err != nil {
		return err
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
	stopMetrics, err := serveProxyMetrics(c.metrics, pm, eng)
	if err != nil {
		return errors.Join(err, ln.Close(), closeStore())
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
	serveErr := serveHTTP(e, srv, ln, c.drain)
	return errors.Join(serveErr, stopMetrics(), closeStore())
}

// proxyStoreOptions returns the client options of --store, nil without
// it.
func proxyStoreOptions(c *proxyConfig) (*redis.Options, error) {
	if c.store == "" {
		return nil, nil
	}
	storeOpts, err := redis.ParseURL(c.store)
	if err != nil {
		return nil, usagef("proxy: --store %q: %v", c.store, err)
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
		return nil, usagef("proxy: --table must name a table, got %q", c.table)
	}
	return storeOpts, nil
}

// checkProxyFlags refuses the flags of dedup proxy that no value would
// make right: a duration not positive, an empty --header, and the like.
func checkProxyFlags(c *proxyConfig) error {
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
	if c.minKeyLength < 1 {
		return usagef("proxy: --min-key-length must be at least 1, got %d", c.minKeyLength)
	}
	return nil
}

// checkLease refuses a --lease longer than the window of a --state: a
// claim leaves with its key's window, and after a crash a retry past the
// window would run again, however long the lease.
func checkLease(c *proxyConfig, window time.Duration, windowFlag bool) error {
	if c.state == "" || c.lease <= window {
		return nil
	}
	whose := ""
	if !windowFlag {
		whose = " (the state's)"
	}
	return usagef("proxy: --lease %v is longer than --window %v%s: after a crash a claim would leave with the window before its lease ends, and a retry would run again", c.lease, window, whose)
}

// serveProxyMetrics serves the metrics of dedup proxy (and of its engine,
// if not nil) at addr until the returned stop; without addr it serves
// nothing.
func serveProxyMetrics(addr string, pm *proxyMetrics, eng *dedup.Engine) (stop func() error, err error) {
	if addr == "" {
		return func() error { return nil }, nil
	}
	cs := []prometheus.Collector{pm}
	if eng != nil {
		cs = append(cs, newCollector(eng, nil))
	}
	reg, err := newRegistry(cs...)
	if err != nil {
		return nil, err
	}
	mln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenErr("proxy", "metrics", addr, err)
	}
	return serveRegistry(mln, reg), nil
}

// serveHTTP serves srv on ln until it fails or a signal arrives; then it
// waits up to drain for the requests in flight.
func serveHTTP(e *env, srv *http.Server, ln net.Listener, drain time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-e.sigs:
		fmt.Fprintf(e.stderr, "dedup proxy: shutting down: waiting up to %v for the requests in flight\n", drain)
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		if err := srv.Shutdown(ctx); err != nil {
			fmt.Fprintf(e.stderr, "dedup proxy: requests still in flight after --drain %v keep their claims until their lease ends\n", drain)
			srv.Close()
		}
		cancel()
		serveErr = <-served
	case serveErr = <-served:
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
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
