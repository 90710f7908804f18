package idempotency

import (
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

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
//	"H1"                     format ("H2": with trailers)
//	status                   uvarint
//	header count             uvarint
//	per header: name, value count, values (each a uvarint length, then bytes)
//	body                     the rest ("H1"), or up to the trailers ("H2")
//	"H2" only: trailer count, per trailer as per header, then the length
//	of the trailers (count included), 4 bytes big-endian
//
// appendHead appends the status and the replayable headers of h to b; the
// body follows them.
func (m *middleware) appendHead(b []byte, status int, h http.Header) []byte {
	b = append(b, 'H', '1')
	b = binary.AppendUvarint(b, uint64(status))
	n := 0
	for k := range h {
		if m.replayable(h, k) {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		if !m.replayable(h, k) {
			continue
		}
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

// appendTrailers appends to the stored response res the trailers the
// handler left in h (the keys Trailer declared, and those set with
// http.TrailerPrefix; with Options.ReplayHeaders, those it lists), making
// it "H2"; res is unchanged without trailers.
func (m *middleware) appendTrailers(res []byte, h http.Header) []byte {
	var names []string // keys of h
	kept := func(name string) bool { return m.allow == nil || m.allow[name] }
	for _, v := range h["Trailer"] {
		for _, f := range strings.Split(v, ",") {
			if k := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f)); len(h[k]) > 0 && kept(k) {
				names = append(names, k)
			}
		}
	}
	for k := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && len(h[k]) > 0 && kept(textproto.CanonicalMIMEHeaderKey(name)) {
			names = append(names, k)
		}
	}
	if len(names) == 0 || len(res) < 2 {
		return res
	}
	res[1] = '2'
	start := len(res)
	res = binary.AppendUvarint(res, uint64(len(names)))
	for _, k := range names {
		res = appendString(res, textproto.CanonicalMIMEHeaderKey(strings.TrimPrefix(k, http.TrailerPrefix)))
		res = binary.AppendUvarint(res, uint64(len(h[k])))
		for _, v := range h[k] {
			res = appendString(res, v)
		}
	}
	return binary.BigEndian.AppendUint32(res, uint32(len(res)-start))
}

// headSize bounds the bytes appendHead appends for h.
func headSize(h http.Header) int {
	n := 2 + 2*binary.MaxVarintLen32
	for k, vs := range h {
		n += 2*binary.MaxVarintLen32 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen32 + len(v)
		}
	}
	return n
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errBadStored = errors.New("idempotency: stored response unreadable")

// replay writes the stored response res.
func (m *middleware) replay(w http.ResponseWriter, res []byte) error {
	if len(res) < 2 || res[0] != 'H' || (res[1] != '1' && res[1] != '2') {
		return errBadStored
	}
	var trailers http.Header
	if res[1] == '2' {
		var err error
		if res, trailers, err = splitTrailers(res); err != nil {
			return err
		}
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
	if trailers == nil {
		h["Content-Length"] = vals[len(vals)-1:]
	} else {
		// Declared before the header is written, the trailers make the
		// response chunked; their values, set after the body, go last.
		for k := range trailers {
			h["Trailer"] = append(h["Trailer"], k)
		}
	}
	w.WriteHeader(int(status))
	w.Write(body)
	for k, vs := range trailers {
		h[k] = vs
	}
	return nil
}

// splitTrailers cuts the trailers off the end of the "H2" stored response
// res, returning the rest and the trailers.
func splitTrailers(res []byte) ([]byte, http.Header, error) {
	if len(res) < 6 {
		return nil, nil, errBadStored
	}
	n := binary.BigEndian.Uint32(res[len(res)-4:])
	if uint64(n) > uint64(len(res)-6) {
		return nil, nil, errBadStored
	}
	end := len(res) - 4
	d := decoder{b: res[end-int(n) : end]}
	count := d.uvarint()
	if count > uint64(n) {
		return nil, nil, errBadStored
	}
	trailers := make(http.Header, count)
	for i := uint64(0); i < count && d.err == nil; i++ {
		k := d.bytes()
		c := d.uvarint()
		if c > uint64(n) {
			return nil, nil, errBadStored
		}
		vs := make([]string, 0, c)
		for j := uint64(0); j < c && d.err == nil; j++ {
			vs = append(vs, string(d.bytes()))
		}
		trailers[textproto.CanonicalMIMEHeaderKey(string(k))] = vs
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, nil, errBadStored
	}
	return res[:end-int(n)], trailers, nil
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

// bytes returns the next length-prefixed string of b.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errBadStored
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
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
