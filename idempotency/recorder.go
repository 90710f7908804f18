package idempotency

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
)

// recorder passes the response through to the client and keeps a copy of
// it, up to max body bytes, as the stored response is written: the status
// and headers at WriteHeader, then the body as it comes, in a buffer taken
// from the middleware's memory (reserved bytes, given back by done; a
// buffer that does not fit makes the response over). Of a response of
// known length it holds back the last byte until the response is stored
// or the key released (end), so that a client never holds a whole
// response whose key a crash could leave in progress.
type recorder struct {
	w        http.ResponseWriter
	m        *middleware
	max      int
	wrote    bool
	status   int
	res      []byte // the stored response so far (nil once over)
	reserved int    // bytes of the middleware's memory res holds
	bodyLen  int    // body bytes in res
	over     bool
	hijacked bool
	length   int64 // the Content-Length header's value, -1 if none
	sent     int64 // body bytes passed on
	held     bool  // last is held back
	last     [1]byte
}

// end sends the byte held back, if any.
func (rw *recorder) end() {
	if rw.held {
		rw.w.Write(rw.last[:])
		rw.held = false
	}
}

// start records the status and the headers h of the response: the head
// of the stored response, in a buffer sized for the body too when its
// length is known.
func (rw *recorder) start(code int, h http.Header) {
	rw.status = code
	rw.length = -1
	if cl := h["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n > 0 {
			rw.length = n
		}
	}
	size := headSize(h)
	if rw.length > 0 && rw.length <= int64(rw.max) {
		size += int(rw.length)
	} else {
		size += 512
	}
	if !rw.m.mem.take(size) {
		rw.over = true
		return
	}
	rw.reserved = size
	rw.res = rw.m.appendHead(make([]byte, 0, size), code, h)
}

// grow makes room in res for n more bytes, taking them from the
// middleware's memory; it reports false if they do not fit.
func (rw *recorder) grow(n int) bool {
	need := len(rw.res) + n
	if need <= cap(rw.res) {
		return true
	}
	head := len(rw.res) - rw.bodyLen
	size := min(max(need, 2*cap(rw.res)), head+rw.max)
	if !rw.m.mem.take(size - cap(rw.res)) {
		return false
	}
	rw.reserved += size - cap(rw.res)
	rw.res = append(make([]byte, 0, size), rw.res...)
	return true
}

// drop gives up storing the response.
func (rw *recorder) drop() {
	rw.over = true
	rw.res = nil
	rw.done()
}

// done gives back the memory res holds.
func (rw *recorder) done() {
	rw.m.mem.give(rw.reserved)
	rw.reserved = 0
}

func (rw *recorder) Header() http.Header { return rw.w.Header() }

func (rw *recorder) WriteHeader(code int) {
	if !rw.wrote && code >= 200 {
		rw.wrote = true
		rw.start(code, rw.w.Header())
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
		if rw.bodyLen+len(p) > rw.max || !rw.grow(len(p)) {
			rw.drop()
		} else {
			rw.res = append(rw.res, p...)
			rw.bodyLen += len(p)
		}
	}
	if rw.length > 0 && !rw.held && len(p) > 0 && rw.sent+int64(len(p)) >= rw.length {
		// The last byte of the response: held back until end.
		last := len(p) - 1
		n, err := rw.w.Write(p[:last])
		rw.sent += int64(n)
		if err != nil {
			return n, err
		}
		rw.last[0], rw.held = p[last], true
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
