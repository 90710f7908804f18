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
//   - While the first request runs: 409 with Retry-After, or, with
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
//     [Options.Scope]) longer than the store holds: 500.
//
// Errors are application/problem+json (RFC 9457). Requests of other methods
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
	"net/http"
	"net/textproto"
	"strconv"
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
		if errors.Is(err, dedup.ErrKeyTooLarge) {
			// No retry can pass: the server's Scope or MaxKeyLength makes
			// keys the store does not hold.
			m.o.ErrorLog("idempotency: begin a key of %d bytes: %v", len(key), err)
			problem(w, http.StatusInternalServerError, "Idempotency key too large for the store", "The request did not run: the key with its scope is longer than the store holds.")
			return
		}
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
	rec := &recorder{w: w, m: m, max: m.o.MaxBody}
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
		rec.start(http.StatusOK, w.Header())
	}
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
