package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// idemLoad sends n POSTs from clients goroutines, request i with key
// prefix+keyOf(i), records each latency in h and returns requests per
// second. Every response must be 201; with replayed, also marked replayed.
// Each goroutine keeps one connection of pool, kept alive between rounds.
func idemLoad(ctx context.Context, pool *idemPool, prefix string, n int, keyOf func(int) int, p Progress, replayed bool, h *Histogram) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	clients := len(pool.conns)
	hists := make([]Histogram, clients)
	errs := make([]error, clients)
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := &pool.conns[c]
			key := make([]byte, 0, 64)
			done := 0
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				key = strconv.AppendInt(append(key[:0], prefix...), int64(keyOf(i)), 10)
				t := time.Now()
				status, rep, err := conn.post(pool, key)
				hists[c].Record(time.Since(t))
				if err != nil {
					errs[c] = err
					return
				}
				if status != 201 || (replayed && !rep) {
					errs[c] = fmt.Errorf("status %d, replayed %v", status, rep)
					return
				}
				if done++; p != nil && done%64 == 0 {
					p.Add(64)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	var first error
	failed := 0
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 1 {
		return 0, fmt.Errorf("%w (and %d more clients failed)", first, failed-1)
	}
	if first != nil {
		return 0, first
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	for i := range hists {
		h.Merge(&hists[i])
	}
	return float64(n) / el.Seconds(), nil
}

// idemPool is the load generator's connections to one target: HTTP/1.1
// keep-alive connections, one per client, each sending the same POST but
// for its key from a buffer it reuses, and reading the response with no
// allocation. It spends a few µs of CPU per request where Go's
// http.Client spends tens (a goroutine pair per connection, a Request and
// a Response with their header maps per call), so that on a machine of few
// cores the clients take little of the CPU the targets are measured on.
// Every target is driven by the same code.
type idemPool struct {
	host  string   // host:port
	hosts []string // of several URLs (a target of many processes): client i's is hosts[i%len]
	path  string
	body  []byte
	conns []idemConn
}

// newIdemPool makes the pool of clients connections to rawURL, or to
// several comma-separated URLs, the clients spread over them in turn (a
// round-robin balancer's share).
func newIdemPool(rawURL string, clients int) (*idemPool, error) {
	var hosts []string
	for _, one := range strings.Split(rawURL, ",") {
		u, err := url.Parse(one)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("bench: target URL %q: want http://host:port", one)
		}
		hosts = append(hosts, u.Host)
	}
	p := &idemPool{
		host:  hosts[0],
		hosts: hosts,
		path:  "/charges",
		body:  []byte(`{"amount":1000,"currency":"eur","source":"tok_visa"}`),
		conns: make([]idemConn, clients),
	}
	for i := range p.conns {
		p.conns[i].host = hosts[i%len(hosts)]
	}
	return p, nil
}

// close closes every connection.
func (p *idemPool) close() {
	for i := range p.conns {
		p.conns[i].close()
	}
}

// idemConn is one keep-alive connection, dialled on first use and again
// after the server closes it.
type idemConn struct {
	host string // host:port
	c    net.Conn
	r    *bufio.Reader
	req  []byte
}

func (c *idemConn) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

// post sends one POST with key and reads the response: its status and
// whether it carries Idempotent-Replayed: true.
func (c *idemConn) post(p *idemPool, key []byte) (status int, replayed bool, err error) {
	if c.c == nil {
		if c.c, err = net.Dial("tcp", c.host); err != nil {
			return 0, false, fmt.Errorf("bench: dial %s: %w", c.host, err)
		}
		if c.r == nil {
			c.r = bufio.NewReaderSize(c.c, 16<<10)
		} else {
			c.r.Reset(c.c)
		}
	}
	b := append(c.req[:0], "POST "...)
	b = append(b, p.path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nIdempotency-Key: "...)
	b = append(b, key...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(p.body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, p.body...)
	c.req = b
	if _, err := c.c.Write(b); err != nil {
		c.close()
		return 0, false, fmt.Errorf("bench: write request: %w", err)
	}
	status, replayed, keep, err := readIdemResponse(c.r)
	if err != nil {
		c.close()
		return 0, false, err
	}
	if !keep {
		c.close()
	}
	return status, replayed, nil
}

var (
	hdrContentLength    = []byte("content-length")
	hdrTransferEncoding = []byte("transfer-encoding")
	hdrConnection       = []byte("connection")
	hdrReplayed         = []byte("idempotent-replayed")
)

// readIdemResponse reads one HTTP/1.1 response from r, skipping 1xx
// ones, and discards its body (of a Content-Length, or chunked). keep
// reports whether the connection stays open.
func readIdemResponse(r *bufio.Reader) (status int, replayed, keep bool, err error) {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return 0, false, false, fmt.Errorf("bench: read status line: %w", err)
		}
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
			return 0, false, false, fmt.Errorf("bench: bad status line %q", line)
		}
		status = 0
		for _, d := range line[9:12] {
			if d < '0' || d > '9' {
				return 0, false, false, fmt.Errorf("bench: bad status line %q", line)
			}
			status = status*10 + int(d-'0')
		}
		keep = line[7] == '1'
		length, chunked := int64(-1), false
		replayed = false
		for {
			h, err := r.ReadSlice('\n')
			if err != nil {
				return 0, false, false, fmt.Errorf("bench: read header: %w", err)
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return 0, false, false, fmt.Errorf("bench: bad header line %q", h)
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, hdrContentLength):
				if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
					return 0, false, false, fmt.Errorf("bench: bad Content-Length %q", value)
				}
			case bytes.EqualFold(name, hdrTransferEncoding):
				chunked = bytes.EqualFold(value, []byte("chunked"))
			case bytes.EqualFold(name, hdrConnection):
				if bytes.EqualFold(value, []byte("close")) {
					keep = false
				}
			case bytes.EqualFold(name, hdrReplayed):
				replayed = string(value) == "true"
			}
		}
		if status >= 100 && status < 200 {
			continue
		}
		switch {
		case chunked:
			err = discardChunked(r)
		case length >= 0:
			_, err = r.Discard(int(length))
		case status == 204 || status == 304:
		default:
			// No length: the body runs to the end of the connection.
			_, err = io.Copy(io.Discard, r)
			keep = false
		}
		if err != nil {
			return 0, false, false, fmt.Errorf("bench: read body: %w", err)
		}
		return status, replayed, keep, nil
	}
}

// discardChunked reads a chunked body and its trailers.
func discardChunked(r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			for {
				t, err := r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := r.Discard(int(n) + 2); err != nil {
			return err
		}
	}
}
