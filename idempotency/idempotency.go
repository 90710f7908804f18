// Package idempotency is net/http middleware for idempotency keys with
// stored results, in the shape of the IETF draft
// draft-ietf-httpapi-idempotency-key-header: the client sends a unique key
// with a write; the first request with the key runs, and every repeat within
// the window gets the first one's stored response instead of running again.
//
// # Contract
//
// For a request whose method is in [Options.Methods]:
//
//   - No key header: the request runs as if the middleware were absent, or,
//     with [Options.RequireKey], gets 400.
//   - A key that is empty, longer than [Options.MaxKeyLength], or holds
//     anything but visible ASCII (0x21-0x7e): 400.
//   - A request body over [Options.MaxRequestBody]: 413.
//   - The key's first request: the handler runs. Its response (status,
//     headers, body) is stored when the handler returns, unless its status
//     is not storable (5xx and 429 by default, [Options.Storable]), its body
//     is over [Options.MaxBody], or it hijacked the connection: then the key
//     is released and the next request with it runs again. A handler that
//     panics releases the key too. The response streams to the client as
//     the handler writes and flushes it, but its end (the last byte, or the
//     last chunk) only once it is stored or the key released: a client that
//     holds a whole response gets it replayed on a retry.
//   - While the first request runs: 409 with Retry-After, or, with
//     [Options.Wait], the stored response as soon as the first request
//     ends within that time.
//   - The key with another request (by [Options.Fingerprint]: method, path
//     and body by default): 422. The fingerprint is checked before a stored
//     response is returned.
//   - The key of a completed request: its stored status, headers and body,
//     with the header Idempotent-Replayed: true. Hop-by-hop headers and Date
//     are not replayed ([Options.ReplayHeaders] gives an allow-list instead).
//   - A store that fails: 503.
//
// Errors are application/problem+json (RFC 9457). Requests of other methods
// pass through. The guarantee across crashes is the store's: with
// [dedup.Engine] the key's claim is durable before the handler runs, so a
// request repeated after a crash, within the lease ([Options.Lease]), gets
// 409 instead of running a second time; after the lease it runs again.
package idempotency

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
)

// Store keeps the keys' claims and results. [dedup.Engine] implements it;
// see [dedup.Engine.Begin] for the semantics each method must keep.
type Store interface {
	Begin(ctx context.Context, key, fingerprint []byte, lease time.Duration) (dedup.Claim, error)
	Complete(ctx context.Context, key []byte, token dedup.Token, result []byte) error
	Release(ctx context.Context, key []byte, token dedup.Token) error
	AwaitKey(ctx context.Context, key []byte) (bool, error)
}

// Outcome is what the middleware did with one request, as reported to
// [Options.Report].
type Outcome uint8

const (
	// Unkeyed: no key (or a method not in Methods); the request ran as is.
	Unkeyed Outcome = iota + 1
	// Executed: the request ran and its response was stored.
	Executed
	// Released: the request ran and its response was not stored (a status
	// not storable, a body over MaxBody, a panic, a hijack, a failed
	// store); the key was released.
	Released
	// Replayed: the stored response was sent.
	Replayed
	// Conflict: the key was in progress: 409.
	Conflict
	// Mismatch: the key came with another request: 422.
	Mismatch
	// Rejected: a bad or missing key, or a request body too large: 400 or 413.
	Rejected
	// Failed: the store failed: 503.
	Failed
)

var outcomeNames = [...]string{"", "unkeyed", "executed", "released", "replayed", "conflict", "mismatch", "rejected", "failed"}

// String returns the outcome's name in lower case ("executed", ...).
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o > 0 {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Options configures [New]. Zero fields take the default their doc ends with.
type Options struct {
	// Store keeps claims and results. Required.
	Store Store
	// Header is the request header carrying the key. Default
	// "Idempotency-Key".
	Header string
	// Methods are the methods that take keys. Default POST and PATCH.
	Methods []string
	// RequireKey answers 400 to a request of Methods without a key.
	// Default false: such a request runs as is.
	RequireKey bool
	// MaxKeyLength is the longest key accepted, in bytes. Default 255.
	MaxKeyLength int
	// Lease bounds how long a key stays in progress when the process
	// running its request dies: set it above the slowest request. Default
	// 30s.
	Lease time.Duration
	// Wait is how long a request whose key is in progress waits for the
	// first request's response before it gets 409. Default 0: 409 at once.
	Wait time.Duration
	// MaxBody is the largest response body stored, in bytes; a larger one
	// is sent, not stored, and the key released. At most
	// [dedup.MaxResultSize] with the headers. Default 1 MiB.
	MaxBody int
	// MaxRequestBody is the largest request body read for the fingerprint,
	// in bytes; a larger one gets 413. Default 10 MiB.
	MaxRequestBody int64
	// Fingerprint identifies the request sent with a key, so that the key
	// sent with another request gets 422. body is the whole request body.
	// Default: SHA-256 of the method, the request URI and the body.
	Fingerprint func(r *http.Request, body []byte) []byte
	// Scope returns the namespace of a request's key (the authenticated
	// account, say): keys of different scopes never meet. Default: one
	// namespace.
	Scope func(r *http.Request) string
	// Storable reports whether a response with status is stored. Default:
	// every status below 500 but 429.
	Storable func(status int) bool
	// ReplayHeaders, if not nil, lists the only response headers replayed.
	// Default nil: every header but the hop-by-hop ones and Date.
	ReplayHeaders []string
	// Report, if set, is called once per request with its outcome and, for
	// Executed, the bytes stored.
	Report func(r *http.Request, o Outcome, stored int)
	// ErrorLog receives failures that cannot reach the client (a result
	// that could not be stored after the response was sent). Default
	// log.Printf.
	ErrorLog func(format string, args ...any)
}

// Validate reports every bad field of o by name.
func (o *Options) Validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("idempotency: Store is required"))
	}
	if o.Header != "" && !validToken(o.Header) {
		errs = append(errs, fmt.Errorf("idempotency: Header must be a header name, got %q", o.Header))
	}
	for _, m := range o.Methods {
		if !validToken(m) {
			errs = append(errs, fmt.Errorf("idempotency: Methods holds %q, not a method", m))
		}
	}
	if o.MaxKeyLength < 0 {
		errs = append(errs, fmt.Errorf("idempotency: MaxKeyLength must not be negative, got %d", o.MaxKeyLength))
	}
	if o.Lease < 0 {
		errs = append(errs, fmt.Errorf("idempotency: Lease must not be negative, got %v", o.Lease))
	}
	if o.Wait < 0 {
		errs = append(errs, fmt.Errorf("idempotency: Wait must not be negative, got %v", o.Wait))
	}
	if o.MaxBody < 0 || o.MaxBody > dedup.MaxResultSize {
		errs = append(errs, fmt.Errorf("idempotency: MaxBody must be 0..%d (dedup.MaxResultSize), got %d", dedup.MaxResultSize, o.MaxBody))
	}
	if o.MaxRequestBody < 0 {
		errs = append(errs, fmt.Errorf("idempotency: MaxRequestBody must not be negative, got %d", o.MaxRequestBody))
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero fields.
func (o *Options) withDefaults() {
	if o.Header == "" {
		o.Header = "Idempotency-Key"
	}
	if o.Methods == nil {
		o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = 255
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.MaxBody == 0 {
		o.MaxBody = min(1<<20, dedup.MaxResultSize-4096)
	}
	if o.MaxRequestBody == 0 {
		o.MaxRequestBody = 10 << 20
	}
	if o.Fingerprint == nil {
		o.Fingerprint = DefaultFingerprint
	}
	if o.Storable == nil {
		o.Storable = DefaultStorable
	}
	if o.ErrorLog == nil {
		o.ErrorLog = log.Printf
	}
}

// DefaultFingerprint is the SHA-256 of the request's method, its request
// URI (path and query) and body.
func DefaultFingerprint(r *http.Request, body []byte) []byte {
	f := fingerprinters.Get().(*fingerprinter)
	f.h.Reset()
	f.buf = append(append(append(append(f.buf[:0], r.Method...), 0), r.URL.RequestURI()...), 0)
	f.h.Write(f.buf)
	f.h.Write(body)
	sum := f.h.Sum(nil)
	if cap(f.buf) <= 4<<10 {
		fingerprinters.Put(f)
	}
	return sum
}

// fingerprinter is a SHA-256 state and a scratch buffer for
// DefaultFingerprint, reused through fingerprinters.
type fingerprinter struct {
	h   hash.Hash
	buf []byte
}

var fingerprinters = sync.Pool{New: func() any { return &fingerprinter{h: sha256.New()} }}

// DefaultStorable stores every status below 500 but 429 (Too Many
// Requests): a server error or a rate limit is worth trying again.
func DefaultStorable(status int) bool { return status < 500 && status != http.StatusTooManyRequests }

// ReplayedHeader marks a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// New returns the middleware configured by opts, or the error of
// [Options.Validate].
func New(opts Options) (func(http.Handler) http.Handler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.withDefaults()
	m := &middleware{o: opts, methods: map[string]bool{}, header: textproto.CanonicalMIMEHeaderKey(opts.Header)}
	for _, x := range opts.Methods {
		m.methods[x] = true
	}
	if opts.ReplayHeaders != nil {
		m.allow = map[string]bool{}
		for _, h := range opts.ReplayHeaders {
			m.allow[textproto.CanonicalMIMEHeaderKey(h)] = true
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type middleware struct {
	o       Options
	methods map[string]bool
	allow   map[string]bool
	header  string // Options.Header in canonical form
}

func (m *middleware) report(r *http.Request, o Outcome, n int) {
	if m.o.Report != nil {
		m.o.Report(r, o, n)
	}
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods[r.Method] {
		m.report(r, Unkeyed, 0)
		next.ServeHTTP(w, r)
		return
	}
	values, present := r.Header[m.header]
	if !present {
		if m.o.RequireKey {
			m.report(r, Rejected, 0)
			problem(w, http.StatusBadRequest, "Idempotency key missing", fmt.Sprintf("This %s needs the %s header.", r.Method, m.o.Header))
			return
		}
		m.report(r, Unkeyed, 0)
		next.ServeHTTP(w, r)
		return
	}
	if err := m.checkKey(values); err != nil {
		m.report(r, Rejected, 0)
		problem(w, http.StatusBadRequest, "Bad idempotency key", err.Error())
		return
	}
	key := values[0]
	if m.o.Scope != nil {
		key = m.o.Scope(r) + "\n" + key
	}
	body, err := m.readBody(r)
	if err != nil {
		m.report(r, Rejected, 0)
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			problem(w, http.StatusRequestEntityTooLarge, "Request body too large", fmt.Sprintf("A request with an idempotency key carries at most %d bytes.", m.o.MaxRequestBody))
			return
		}
		problem(w, http.StatusBadRequest, "Unreadable request body", err.Error())
		return
	}
	fp := m.o.Fingerprint(r, body)
	claim, err := m.begin(r.Context(), []byte(key), fp)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		m.report(r, Failed, 0)
		m.o.ErrorLog("idempotency: begin %q: %v", key, err)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "Idempotency store unavailable", "The request did not run; try it again later.")
		return
	}
	switch claim.State {
	case dedup.ClaimCompleted:
		if err := m.replay(w, claim.Result); err != nil {
			m.report(r, Failed, 0)
			m.o.ErrorLog("idempotency: replay %q: %v", key, err)
			problem(w, http.StatusInternalServerError, "Stored response unreadable", err.Error())
			return
		}
		m.report(r, Replayed, 0)
	case dedup.ClaimMismatch:
		m.report(r, Mismatch, 0)
		problem(w, http.StatusUnprocessableEntity, "Idempotency key reused", "This idempotency key was used with another request.")
	case dedup.ClaimInProgress:
		m.report(r, Conflict, 0)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "Request in progress", fmt.Sprintf("A request with this idempotency key is in progress (lease ends in %v).", claim.LeaseLeft.Round(time.Millisecond)))
	case dedup.ClaimNew:
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		m.run(w, r, next, []byte(key), claim.Token)
	default:
		m.report(r, Failed, 0)
		problem(w, http.StatusInternalServerError, "Unknown claim state", claim.State.String())
	}
}

// begin claims key, waiting up to Options.Wait while it is in progress.
func (m *middleware) begin(ctx context.Context, key, fp []byte) (dedup.Claim, error) {
	deadline := time.Now().Add(m.o.Wait)
	for {
		c, err := m.o.Store.Begin(ctx, key, fp, m.o.Lease)
		if err != nil || c.State != dedup.ClaimInProgress {
			return c, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return c, nil
		}
		wctx, cancel := context.WithTimeout(ctx, min(left, c.LeaseLeft+time.Millisecond))
		local, err := m.o.Store.AwaitKey(wctx, key)
		if !local && err == nil {
			// Held by an owner outside this process: ask again soon.
			t := time.NewTimer(min(left, 50*time.Millisecond))
			select {
			case <-t.C:
			case <-wctx.Done():
			}
			t.Stop()
		}
		cancel()
		if ctx.Err() != nil {
			return dedup.Claim{}, ctx.Err()
		}
	}
}

func (m *middleware) checkKey(values []string) error {
	if len(values) != 1 {
		return fmt.Errorf("The %s header must appear once, got %d.", m.o.Header, len(values))
	}
	k := values[0]
	if k == "" {
		return fmt.Errorf("The %s header is empty.", m.o.Header)
	}
	if len(k) > m.o.MaxKeyLength {
		return fmt.Errorf("The %s header is %d bytes long; keys are at most %d.", m.o.Header, len(k), m.o.MaxKeyLength)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Errorf("The %s header holds byte 0x%02x at %d; keys are visible ASCII.", m.o.Header, k[i], i)
		}
	}
	return nil
}

func (m *middleware) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	defer r.Body.Close()
	if n := r.ContentLength; n > 0 && n <= m.o.MaxRequestBody && n <= 64<<10 {
		// The length is known: one read into a buffer of that size, and a
		// check that nothing follows (a Body that is not net/http's might
		// hold more). Above 64 KiB the buffer grows with what arrives, so
		// that a client announcing a large body and sending none does not
		// hold its size in memory.
		b := make([]byte, n)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		var one [1]byte
		if k, _ := r.Body.Read(one[:]); k == 0 {
			return b, nil
		}
		if n+1 > m.o.MaxRequestBody {
			return nil, &http.MaxBytesError{Limit: m.o.MaxRequestBody}
		}
		rest, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, m.o.MaxRequestBody-n-1))
		return append(append(b, one[0]), rest...), err
	}
	return io.ReadAll(http.MaxBytesReader(nil, r.Body, m.o.MaxRequestBody))
}

// run runs the key's first request, then stores its response or releases
// the key.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, key []byte, tok dedup.Token) {
	rec := &recorder{w: w, max: m.o.MaxBody}
	ctx := context.WithoutCancel(r.Context())
	finished := false
	defer func() {
		if finished {
			rec.end()
			return
		}
		// The handler panicked: the work may not have happened.
		if err := m.o.Store.Release(ctx, key, tok); err != nil {
			m.o.ErrorLog("idempotency: release %q after a panic: %v", key, err)
		}
		m.report(r, Released, 0)
	}()
	next.ServeHTTP(rec, r)
	finished = true
	if !rec.wrote {
		rec.status = http.StatusOK
		rec.header = w.Header().Clone()
	}
	if rec.over || rec.hijacked || !m.o.Storable(rec.status) {
		if err := m.o.Store.Release(ctx, key, tok); err != nil {
			m.o.ErrorLog("idempotency: release %q: %v", key, err)
		}
		m.report(r, Released, 0)
		return
	}
	res := m.encode(rec)
	if err := m.o.Store.Complete(ctx, key, tok, res); err != nil {
		m.o.ErrorLog("idempotency: store the response of %q: %v", key, err)
		if err := m.o.Store.Release(ctx, key, tok); err != nil && !errors.Is(err, dedup.ErrLeaseLost) {
			m.o.ErrorLog("idempotency: release %q: %v", key, err)
		}
		m.report(r, Released, 0)
		return
	}
	m.report(r, Executed, len(res))
}

// hopHeaders are not replayed: they describe one connection, or one
// response's moment (Date), not the result.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Date": true, "Content-Length": true,
}

// replayable reports whether header name of h is stored and replayed.
func (m *middleware) replayable(h http.Header, name string) bool {
	if m.allow != nil {
		return m.allow[name]
	}
	if hopHeaders[name] || strings.HasPrefix(name, http.TrailerPrefix) {
		return false
	}
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f)) == name {
				return false
			}
		}
	}
	return true
}

// A stored response:
//
//	"H1"                     format
//	status                   uvarint
//	header count             uvarint
//	per header: name, value count, values (each a uvarint length, then bytes)
//	body                     the rest
func (m *middleware) encode(rec *recorder) []byte {
	b := make([]byte, 0, 64+rec.body.Len())
	b = append(b, 'H', '1')
	b = binary.AppendUvarint(b, uint64(rec.status))
	n := 0
	for k := range rec.header {
		if m.replayable(rec.header, k) {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range rec.header {
		if !m.replayable(rec.header, k) {
			continue
		}
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, rec.body.Bytes()...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errBadStored = errors.New("idempotency: stored response unreadable")

// replay writes the stored response res.
func (m *middleware) replay(w http.ResponseWriter, res []byte) error {
	if len(res) < 2 || res[0] != 'H' || res[1] != '1' {
		return errBadStored
	}
	// A first pass checks the stored headers and counts their values; the
	// second makes them strings, every one a part of one string, in one
	// slice of values.
	d := decoder{b: res[2:]}
	status := d.uvarint()
	n := d.uvarint()
	values := 0
	for i := uint64(0); i < n && d.err == nil; i++ {
		d.skip()
		c := d.uvarint()
		for j := uint64(0); j < c && d.err == nil; j++ {
			d.skip()
		}
		values += int(c)
	}
	if d.err != nil || status < 100 || status > 999 || values > len(res) {
		return errBadStored
	}
	body := d.b
	head := string(res[2 : len(res)-len(body)])
	vals := make([]string, 0, values+2)
	d = decoder{s: head}
	d.uvarint()
	d.uvarint()
	h := w.Header()
	for i := uint64(0); i < n; i++ {
		k := textproto.CanonicalMIMEHeaderKey(d.str())
		c := int(d.uvarint())
		start := len(vals)
		for j := 0; j < c; j++ {
			vals = append(vals, d.str())
		}
		if len(vals) == start {
			continue
		}
		if old, ok := h[k]; ok {
			h[k] = append(old, vals[start:]...)
		} else {
			h[k] = vals[start:len(vals):len(vals)]
		}
	}
	vals = append(vals, "true", strconv.Itoa(len(body)))
	h[ReplayedHeader] = vals[len(vals)-2 : len(vals)-1 : len(vals)-1]
	h["Content-Length"] = vals[len(vals)-1:]
	w.WriteHeader(int(status))
	w.Write(body)
	return nil
}

// decoder reads a stored response's fields, from b or, once checked, from
// s (strings then share s's memory).
type decoder struct {
	b   []byte
	s   string
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	var v uint64
	var n int
	if d.b != nil {
		v, n = binary.Uvarint(d.b)
	} else {
		v, n = uvarintString(d.s)
	}
	if n <= 0 || v > math.MaxInt32 {
		d.err = errBadStored
		return 0
	}
	if d.b != nil {
		d.b = d.b[n:]
	} else {
		d.s = d.s[n:]
	}
	return v
}

// skip steps over a length-prefixed string of b.
func (d *decoder) skip() {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errBadStored
		return
	}
	d.b = d.b[n:]
}

// str returns the next length-prefixed string of s, checked before.
func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.s)) {
		d.err = errBadStored
		return ""
	}
	v := d.s[:n]
	d.s = d.s[n:]
	return v
}

// uvarintString is binary.Uvarint of a string.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -(i + 1)
			}
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

// recorder passes the response through to the client and keeps a copy of
// it, up to max body bytes. Of a response of known length it holds back
// the last byte until the response is stored or the key released (end), so
// that a client never holds a whole response whose key a crash could leave
// in progress.
type recorder struct {
	w        http.ResponseWriter
	max      int
	wrote    bool
	status   int
	header   http.Header
	body     bytes.Buffer
	over     bool
	hijacked bool
	length   int64 // the Content-Length header's value, -1 if none
	sent     int64 // body bytes passed on
	held     []byte
}

// end sends the byte held back, if any.
func (rw *recorder) end() {
	if len(rw.held) > 0 {
		rw.w.Write(rw.held)
		rw.held = nil
	}
}

func (rw *recorder) Header() http.Header { return rw.w.Header() }

func (rw *recorder) WriteHeader(code int) {
	if !rw.wrote && code >= 200 {
		rw.wrote = true
		rw.status = code
		rw.header = rw.w.Header().Clone()
		rw.length = -1
		if n, err := strconv.ParseInt(rw.header.Get("Content-Length"), 10, 64); err == nil && n > 0 {
			rw.length = n
		}
	}
	if code == http.StatusSwitchingProtocols {
		rw.hijacked = true
	}
	rw.w.WriteHeader(code)
}

func (rw *recorder) Write(p []byte) (int, error) {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if !rw.over {
		if rw.body.Len()+len(p) > rw.max {
			rw.over = true
			rw.body = bytes.Buffer{}
		} else {
			rw.body.Write(p)
		}
	}
	if rw.length > 0 && rw.held == nil && len(p) > 0 && rw.sent+int64(len(p)) >= rw.length {
		// The last byte of the response: held back until end.
		last := len(p) - 1
		n, err := rw.w.Write(p[:last])
		rw.sent += int64(n)
		if err != nil {
			return n, err
		}
		rw.held = []byte{p[last]}
		return len(p), nil
	}
	n, err := rw.w.Write(p)
	rw.sent += int64(n)
	return n, err
}

// Flush sends what was written so far to the client.
func (rw *recorder) Flush() {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(rw.w).Flush()
}

// FlushError is Flush reporting its error, for http.ResponseController.
func (rw *recorder) FlushError() error {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(rw.w).Flush()
}

// Hijack hands the connection to the handler; the response is not stored.
func (rw *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	rw.hijacked = true
	return http.NewResponseController(rw.w).Hijack()
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.w }

// problem writes an RFC 9457 problem+json response.
func problem(w http.ResponseWriter, status int, title, detail string) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// validToken reports whether s is an HTTP token (a header name or method).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
