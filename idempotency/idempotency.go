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
//   - The key is the header's value as the draft's sf-string ("a b", with
//     \" and \\ escaped) or the same unquoted (abc and "abc" are one key).
//     A key that is empty, shorter than [Options.MinKeyLength], longer
//     than [Options.MaxKeyLength], a malformed sf-string, or an unquoted
//     one with anything but visible ASCII (0x21-0x7e): 400.
//   - A keyed request whose body is over [Options.MaxRequestBody]: 413 (the
//     body of a request without a key is not read).
//   - The key's first request: the handler runs. Its response (status,
//     headers, body) is stored when the handler returns, unless its status
//     is not storable (5xx and 429 by default, [Options.Storable]), its body
//     is over [Options.MaxBody], or it hijacked the connection: then the key
//     is released and the next request with it runs again. A handler that
//     panics releases the key too. The response streams to the client as
//     the handler writes and flushes it, but its end (the last byte, or the
//     last chunk) only once it is stored or the key released: a client that
//     holds a whole response gets it replayed on a retry.
//   - While the first request runs: 409 with Retry-After (the seconds left
//     on the owner's lease), or, with
//     [Options.Wait], the stored response as soon as the first request
//     ends within that time. If the first request's key is released
//     instead, one waiting request claims the key and runs.
//   - The key with another request (by [Options.Fingerprint]: method, path
//     and body by default): 422. The fingerprint is checked before a stored
//     response is returned.
//   - The key of a completed request: its stored status, headers and body,
//     with the header Idempotent-Replayed: true. Hop-by-hop headers and Date
//     are not replayed ([Options.ReplayHeaders] gives an allow-list instead).
//     Trailers are stored and replayed as trailers.
//   - A store that fails: 503 with Retry-After; a key (with its
//     [Options.Scope]) longer than the store holds, or an [Options.Lease]
//     longer than the store's window: 500.
//   - Request bodies, recorded and replayed responses held at once stay
//     within [Options.MaxMemory]: a keyed request that does not fit gets
//     503 with Retry-After and runs nothing; a response that does not fit
//     is sent, not stored, and its key released.
//
// Errors are application/problem+json (RFC 9457), their type a link to
// their documentation ([ProblemType]). Requests of other methods
// pass through. The guarantee across crashes is the store's: with
// [dedup.Engine] the key's claim is durable before the handler runs, so a
// request repeated after a crash, within the lease ([Options.Lease]), gets
// 409 instead of running a second time; after the lease it runs again.
package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
)

// Store keeps the keys' claims and results. [dedup.Engine] implements it
// in this process, [RESPStore] on a `dedup serve` shared by many; see
// [dedup.Engine.Begin] for the semantics each method must keep.
type Store interface {
	Begin(ctx context.Context, key, fingerprint []byte, lease time.Duration) (dedup.Claim, error)
	Complete(ctx context.Context, key []byte, token dedup.Token, result []byte) error
	Release(ctx context.Context, key []byte, token dedup.Token) error
	Renew(ctx context.Context, key []byte, token dedup.Token, lease time.Duration) error
	AwaitKey(ctx context.Context, key []byte) (bool, error)
}

// New returns the middleware configured by opts, or the error of
// [Options.Validate].
func New(opts Options) (func(http.Handler) http.Handler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.withDefaults()
	m := &middleware{o: opts, methods: map[string]bool{}, header: textproto.CanonicalMIMEHeaderKey(opts.Header)}
	m.mem.max = opts.MaxMemory
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
	mem     budget
}

// budget counts the bytes held for the requests in flight against
// Options.MaxMemory.
type budget struct {
	max  int64
	used atomic.Int64
}

// take reserves n bytes, or reports false if they do not fit.
func (b *budget) take(n int) bool {
	for {
		u := b.used.Load()
		if u+int64(n) > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+int64(n)) {
			return true
		}
	}
}

// give returns n bytes taken.
func (b *budget) give(n int) { b.used.Add(-int64(n)) }

// errOverloaded: a request's bytes do not fit in Options.MaxMemory.
var errOverloaded = errors.New("idempotency: over MaxMemory")

// overloaded answers a request that did not fit in Options.MaxMemory.
func (m *middleware) overloaded(w http.ResponseWriter, r *http.Request) {
	m.report(r, Overloaded, 0)
	w.Header().Set("Retry-After", "1")
	problem(w, http.StatusServiceUnavailable, "Server busy", "The server holds as many requests as its memory allows; the request did not run. Try it again later.")
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
	key, err := m.checkKey(values)
	if err != nil {
		m.report(r, Rejected, 0)
		problem(w, http.StatusBadRequest, "Bad idempotency key", err.Error())
		return
	}
	if m.o.Scope != nil {
		key = m.o.Scope(r) + "\n" + key
	}
	body, held, err := m.readBody(r)
	defer m.mem.give(held)
	if errors.Is(err, errOverloaded) {
		m.overloaded(w, r)
		return
	}
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
		if errors.Is(err, dedup.ErrKeyTooLarge) {
			// No retry can pass: the server's Scope or MaxKeyLength makes
			// keys the store does not hold.
			m.o.ErrorLog("idempotency: begin a key of %d bytes: %v", len(key), err)
			problem(w, http.StatusInternalServerError, "Idempotency key too large for the store", "The request did not run: the key with its scope is longer than the store holds.")
			return
		}
		if errors.Is(err, dedup.ErrBadLease) {
			// No retry can pass either: Options.Lease is longer than the
			// store's window.
			m.o.ErrorLog("idempotency: begin with Lease %v: %v", m.o.Lease, err)
			problem(w, http.StatusInternalServerError, "Idempotency lease longer than the store's window", "The request did not run: the server's lease outlasts the window its keys are kept for.")
			return
		}
		m.o.ErrorLog("idempotency: begin %q: %v", key, err)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "Idempotency store unavailable", "The request did not run; try it again later.")
		return
	}
	switch claim.State {
	case dedup.ClaimCompleted:
		if !m.mem.take(len(claim.Result)) {
			m.overloaded(w, r)
			return
		}
		defer m.mem.give(len(claim.Result))
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
		// The lease left: the owner's lease is renewed while its request
		// runs, and ends that long after its process is gone.
		w.Header().Set("Retry-After", strconv.FormatInt(int64(max(1, (claim.LeaseLeft+time.Second-1)/time.Second)), 10))
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

// checkKey returns the key of the header's values: the draft's sf-string
// ("abc", with \" and \\ escapes, spaces allowed), or the same characters
// unquoted (abc: visible ASCII, no space), one key either way.
func (m *middleware) checkKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", fmt.Errorf("The %s header must appear once, got %d.", m.o.Header, len(values))
	}
	k := values[0]
	if k == "" {
		return "", fmt.Errorf("The %s header is empty.", m.o.Header)
	}
	if k[0] == '"' {
		var err error
		if k, err = unquoteSFString(k); err != nil {
			return "", fmt.Errorf("The %s header is not a structured-field string: %v.", m.o.Header, err)
		}
		if k == "" {
			return "", fmt.Errorf("The %s header is an empty string.", m.o.Header)
		}
	} else {
		for i := 0; i < len(k); i++ {
			if k[i] < 0x21 || k[i] > 0x7e {
				return "", fmt.Errorf("The %s header holds byte 0x%02x at %d; an unquoted key is visible ASCII (quote it, as a structured-field string, for spaces).", m.o.Header, k[i], i)
			}
		}
	}
	if len(k) < m.o.MinKeyLength {
		return "", fmt.Errorf("The %s header's key is %d bytes long; keys are at least %d.", m.o.Header, len(k), m.o.MinKeyLength)
	}
	if len(k) > m.o.MaxKeyLength {
		return "", fmt.Errorf("The %s header's key is %d bytes long; keys are at most %d.", m.o.Header, len(k), m.o.MaxKeyLength)
	}
	return k, nil
}

// unquoteSFString reads an RFC 8941 sf-string: DQUOTE, printable ASCII
// (0x20-0x7e) with \" and \\ escaped, DQUOTE, nothing after.
func unquoteSFString(s string) (string, error) {
	var b []byte
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 >= len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", fmt.Errorf("a backslash at %d escapes neither a quote nor a backslash", i)
			}
			i++
			b = append(b, s[i])
		case c == '"':
			if i != len(s)-1 {
				return "", fmt.Errorf("%d bytes follow the closing quote", len(s)-1-i)
			}
			return string(b), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte 0x%02x at %d", c, i)
		default:
			b = append(b, c)
		}
	}
	return "", errors.New("no closing quote")
}

// readBody reads r's body, up to Options.MaxRequestBody, into a buffer
// it takes from the middleware's memory: held bytes, to give back once
// the request is over (even with an error). The buffer starts at the
// announced length when that is at most 64 KiB and grows with what
// arrives, so that a client announcing a large body and sending none does
// not hold its size.
func (m *middleware) readBody(r *http.Request) (body []byte, held int, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	defer r.Body.Close()
	// A length announced over the limit, or over the memory left now, is
	// refused before a byte is read: a client waiting for 100 Continue
	// then gets the answer instead of sending a body cut short.
	switch n := r.ContentLength; {
	case n > m.o.MaxRequestBody:
		return nil, 0, &http.MaxBytesError{Limit: m.o.MaxRequestBody}
	case n > m.mem.max-m.mem.used.Load():
		return nil, 0, errOverloaded
	}
	limit := int(min(m.o.MaxRequestBody, math.MaxInt-1))
	size := 512
	if n := r.ContentLength; n > 0 && n <= 64<<10 {
		size = int(n) + 1 // +1: room to see that nothing follows
	}
	size = min(size, limit+1)
	for {
		if len(body) == cap(body) {
			if len(body) > limit {
				return nil, held, &http.MaxBytesError{Limit: m.o.MaxRequestBody}
			}
			grow := min(max(cap(body), size), limit+1-cap(body))
			if !m.mem.take(grow) {
				return nil, held, errOverloaded
			}
			held += grow
			body = append(make([]byte, 0, cap(body)+grow), body...)
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			switch {
			case len(body) > limit:
				return nil, held, &http.MaxBytesError{Limit: m.o.MaxRequestBody}
			case int64(len(body)) < r.ContentLength:
				return nil, held, io.ErrUnexpectedEOF
			}
			return body, held, nil
		}
		if err != nil {
			return nil, held, err
		}
	}
}

// run runs the key's first request, then stores its response or releases
// the key.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, key []byte, tok dedup.Token) {
	rec := &recorder{w: w, m: m, max: m.o.MaxBody}
	ctx := context.WithoutCancel(r.Context())
	rn := m.startRenewing(key, tok)
	d := &deferral{result: make(chan lateResult, 1)}
	r = r.WithContext(context.WithValue(r.Context(), deferKey{}, d))
	finished := false
	defer func() {
		rec.done()
		if finished {
			rec.end()
			return
		}
		rn.stop()
		// The handler panicked: the work may not have happened.
		if err := m.o.Store.Release(ctx, key, tok); err != nil {
			m.o.ErrorLog("idempotency: release %q after a panic: %v", key, err)
		}
		m.report(r, Released, 0)
	}()
	next.ServeHTTP(rec, r)
	finished = true
	if !rec.wrote {
		rec.start(http.StatusOK, w.Header())
	}
	if d.deferred() {
		// The response sent is not the work's: the key stays claimed
		// until the work ends (Defer).
		go m.finishDeferred(d, rn, key, tok)
		m.report(r, Deferred, 0)
		return
	}
	rn.stop()
	if rec.over || rec.hijacked || !m.o.Storable(rec.status) {
		if err := m.o.Store.Release(ctx, key, tok); err != nil {
			m.o.ErrorLog("idempotency: release %q: %v", key, err)
		}
		m.report(r, Released, 0)
		return
	}
	res := m.appendTrailers(rec.res, w.Header())
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

// ProblemDocs is the page that documents the middleware's problem types:
// the type of each problem+json answer is this page with the problem's
// anchor, its title in lower case with dashes
// (ProblemDocs + "#idempotency-key-reused").
const ProblemDocs = "https://github.com/streamdedup/dedup/blob/main/docs/idempotency.md"

// ProblemType returns the type URI of the problem titled title.
func ProblemType(title string) string {
	slug := make([]byte, 0, len(title))
	for i := 0; i < len(title); i++ {
		switch c := title[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			slug = append(slug, c)
		case c >= 'A' && c <= 'Z':
			slug = append(slug, c+'a'-'A')
		case c == ' ' || c == '-':
			slug = append(slug, '-')
		}
	}
	return ProblemDocs + "#" + string(slug)
}

// problem writes an RFC 9457 problem+json response.
func problem(w http.ResponseWriter, status int, title, detail string) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{ProblemType(title), title, status, detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
