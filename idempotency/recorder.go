package idempotency

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
)

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
