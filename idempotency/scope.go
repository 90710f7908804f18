package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/textproto"
)

// ScopeByHeaders returns an [Options.Scope] that keeps apart the keys of
// requests that differ in any of the headers names (Authorization, say,
// or an API key's header): the scope is the SHA-256 of the headers'
// values, so that neither the store nor its backups hold a credential. A
// request with none of the headers has the empty scope, shared by every
// such request and by no request that has one.
func ScopeByHeaders(names ...string) func(r *http.Request) string {
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return func(r *http.Request) string {
		var h [sha256.Size]byte
		present := false
		d := sha256.New()
		for _, n := range canon {
			vs, ok := r.Header[n]
			if ok {
				present = true
			}
			// name, value count, values, each length-prefixed: no two
			// sets of values hash alike.
			d.Write([]byte{byte(len(n)), byte(len(vs))})
			d.Write([]byte(n))
			for _, v := range vs {
				d.Write([]byte{byte(len(v) >> 24), byte(len(v) >> 16), byte(len(v) >> 8), byte(len(v))})
				d.Write([]byte(v))
			}
		}
		if !present {
			return ""
		}
		return hex.EncodeToString(d.Sum(h[:0])[:16])
	}
}
