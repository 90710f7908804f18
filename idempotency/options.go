package idempotency

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
)

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
	// Failed: the store failed (503), or refused the key as too large
	// (500).
	Failed
	// Overloaded: the request's body or stored response did not fit in
	// [Options.MaxMemory] beside the other requests in flight: 503 with
	// Retry-After, and nothing ran.
	Overloaded
	// Deferred: the handler called [Defer]: its response was sent, not
	// stored, and the key stays in progress until the work it left
	// running ends (or, its outcome unknown, until the lease passes).
	Deferred
)

var outcomeNames = [...]string{"", "unkeyed", "executed", "released", "replayed", "conflict", "mismatch", "rejected", "failed", "overloaded", "deferred"}

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
	// MinKeyLength is the shortest key accepted, in bytes: a key shorter
	// gets 400 (a long random key, a UUID say, is what keeps the keys of
	// one scope from meeting by chance). Default 1.
	MinKeyLength int
	// Lease bounds how long a key stays in progress when the process
	// running its request dies: while the request runs, the middleware
	// renews the claim every Lease/3, so a request slower than the lease
	// still runs once. It must be within the store's window
	// ([dedup.ErrBadLease]: every keyed request then gets 500). Default 30s.
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
	// MaxMemory bounds the bytes the middleware holds at once for the
	// requests in flight: the keyed request bodies it reads (for the
	// fingerprint, kept to pass on), the responses it records to store,
	// and the stored responses it replays. A keyed request that does not
	// fit gets 503 with Retry-After and runs nothing; a response that does
	// not fit is sent, not stored, and its key released, as one over
	// MaxBody. At least MaxRequestBody + MaxBody. Default 256 MiB, or
	// MaxRequestBody + MaxBody if that is more.
	MaxMemory int64
	// Fingerprint identifies the request sent with a key, so that the key
	// sent with another request gets 422. body is the whole request body.
	// Default: SHA-256 of the method, the request URI and the body.
	Fingerprint func(r *http.Request, body []byte) []byte
	// Scope returns the namespace of a request's key (the authenticated
	// account, say): keys of different scopes never meet, so that one
	// client never gets the stored response of another's key.
	// [ScopeByHeaders] scopes by credentials a request carries. Default:
	// one namespace.
	Scope func(r *http.Request) string
	// Storable reports whether a response with status is stored. Default:
	// every status below 500 but 429.
	Storable func(status int) bool
	// ReplayHeaders, if not nil, lists the only response headers (and
	// trailers) replayed.
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

// standardMethod returns the method of RFC 9110 (and PATCH) that m spells
// in any case, or "".
func standardMethod(m string) string {
	for _, std := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace} {
		if strings.EqualFold(m, std) {
			return std
		}
	}
	return ""
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
		} else if std := standardMethod(m); std != "" && std != m {
			// Methods are case-sensitive: "post" would never match.
			errs = append(errs, fmt.Errorf("idempotency: Methods holds %q, which no request has: methods are case-sensitive, did you mean %q?", m, std))
		}
	}
	if o.MaxKeyLength < 0 {
		errs = append(errs, fmt.Errorf("idempotency: MaxKeyLength must not be negative, got %d", o.MaxKeyLength))
	}
	if o.MinKeyLength < 0 {
		errs = append(errs, fmt.Errorf("idempotency: MinKeyLength must not be negative, got %d", o.MinKeyLength))
	} else if d := *o; o.MaxKeyLength >= 0 {
		d.withDefaults()
		if d.MinKeyLength > d.MaxKeyLength {
			errs = append(errs, fmt.Errorf("idempotency: MinKeyLength %d is over MaxKeyLength %d: no key would pass", d.MinKeyLength, d.MaxKeyLength))
		}
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
	if o.MaxMemory < 0 {
		errs = append(errs, fmt.Errorf("idempotency: MaxMemory must not be negative, got %d", o.MaxMemory))
	} else if d := *o; o.MaxMemory > 0 && o.MaxBody >= 0 && o.MaxRequestBody >= 0 {
		d.withDefaults()
		if need := d.MaxRequestBody + int64(d.MaxBody); o.MaxMemory < need {
			errs = append(errs, fmt.Errorf("idempotency: MaxMemory must hold one request's body and response, MaxRequestBody + MaxBody = %d bytes, got %d", need, o.MaxMemory))
		}
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
	if o.MinKeyLength == 0 {
		o.MinKeyLength = 1
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
	if o.MaxMemory == 0 {
		o.MaxMemory = max(256<<20, o.MaxRequestBody+int64(o.MaxBody))
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
