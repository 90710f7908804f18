package resp

import (
	"errors"
	"math"
	"net"
	"strconv"
	"time"
)

// maxOutBatch is the reply bytes a connection builds before it hands them
// to its queue even while more commands are buffered.
const maxOutBatch = 1 << 20

// conn is one served connection: its client state, its request reader and
// the replies of the commands served since the last flush. One goroutine
// serves it; its methods are not safe for concurrent use.
type conn struct {
	srv *Server
	nc  net.Conn
	rd  *reqReader
	out []byte     // replies not yet handed to q
	q   replyQueue // the replies on their way to the client

	id      int64
	name    string
	authed  bool
	closed  bool
	resp3   bool     // HELLO 3 chose RESP3
	asking  bool     // ASKING was the last command (cluster)
	tx      *tx      // the transaction since MULTI, nil outside one
	pending int      // replies built since the last flush
	dirty   []*table // tables with keys answered New and not yet synced (FsyncAlways)
	netIn   uint64   // bytes read, added to the server's count at flushes
}

// serveConn serves one connection until it is closed or fails.
func (s *Server) serveConn(nc net.Conn) {
	defer s.connWG.Done()
	s.totalConns.Add(1)
	refuse := func(msg string) {
		s.rejectedConns.Add(1)
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write([]byte(msg))
		_ = nc.Close()
	}
	n := s.clients.Add(1)
	defer s.clients.Add(-1)
	if n > int64(s.cfg.MaxClients) || s.closing.Load() {
		refuse("-ERR max number of clients reached\r\n")
		return
	}
	if s.cfg.RequirePass == "" && !s.cfg.Unprotected && !isLocal(nc.RemoteAddr()) {
		refuse(deniedMsg)
		return
	}
	c := &conn{srv: s, nc: nc, id: s.nextID.Add(1), authed: s.cfg.RequirePass == ""}
	c.q.init(nc, s.cfg.MaxReplyBuffer, s.cfg.WriteTimeout)
	c.rd = newReqReader(nc, reqLimits{
		maxArgSize:     int64(s.cfg.MaxArgSize),
		maxArgs:        int64(s.cfg.MaxArgs),
		maxCommandSize: int64(s.cfg.MaxCommandSize),
	}, &c.netIn)
	if !s.track(c, true) {
		_ = nc.Close()
		return
	}
	defer s.track(c, false)
	c.serve()
}

// track adds c to the served connections, or removes it; adding fails
// once the server shuts down.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.served, c)
		return true
	}
	if s.shut {
		return false
	}
	s.served[c] = struct{}{}
	return true
}

// serve reads and serves commands until the connection ends.
func (c *conn) serve() {
	s := c.srv
	for {
		args, err := c.rd.next(c.flush)
		if err != nil {
			var pe *protoError
			if errors.As(err, &pe) && !c.closed {
				s.rejectedRequests.Add(1)
				c.WriteError("ERR " + pe.Error())
				_ = c.flush()
			}
			break
		}
		s.commands.Add(1)
		s.dispatch(c, args)
		if c.closed {
			break
		}
		c.pending++
		if c.pending >= s.cfg.MaxPendingReplies || len(c.out) >= maxOutBatch {
			if c.flush() != nil {
				break
			}
		}
	}
	c.close()
}

// errConnClosed ends a connection whose replies were dropped.
var errConnClosed = errors.New("resp: connection closed")

// flush hands the replies built to the queue: under FsyncAlways after the
// commit of the tables they marked keys in (concurrent connections share
// it). If a commit fails it drops the replies and closes the connection,
// since they would acknowledge keys that are not durable.
func (c *conn) flush() error {
	s := c.srv
	if c.netIn > 0 {
		s.netInput.Add(c.netIn)
		c.netIn = 0
	}
	c.pending = 0
	for i, t := range c.dirty {
		c.dirty[i] = nil
		if c.closed {
			continue
		}
		s.syncs.Add(1)
		if err := t.commit(nil); err != nil && !(errors.Is(err, errTableClosed) && t.handedOver.Load()) {
			s.logf("resp: table %q: commit for a client: %v; closing the connection unanswered", t.name, err)
			c.out, c.closed = nil, true
		}
	}
	c.dirty = c.dirty[:0]
	if c.closed {
		return errConnClosed
	}
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.q.write(c.out)
	if cap(c.out) > maxOutBatch {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return err
}

// close lets the replies queued go out first (within WriteTimeout, and
// not at all when the server shuts down), then closes the connection.
func (c *conn) close() {
	c.closed = true
	wait := c.srv.cfg.WriteTimeout
	if c.srv.closing.Load() {
		wait = 0
	}
	_ = c.q.close(wait)
}

// Reply writers. Each appends one RESP value to the connection's replies,
// in RESP3 after HELLO 3 and in RESP2 otherwise.

// WriteString writes a simple string.
func (c *conn) WriteString(s string) {
	c.out = append(c.out, '+')
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// WriteError writes an error; msg starts with its code ("ERR ...").
func (c *conn) WriteError(msg string) {
	c.out = append(c.out, '-')
	c.out = append(c.out, msg...)
	c.out = append(c.out, '\r', '\n')
}

// WriteInt writes an integer.
func (c *conn) WriteInt(n int) { c.WriteInt64(int64(n)) }

// WriteInt64 writes an integer.
func (c *conn) WriteInt64(n int64) {
	c.out = append(c.out, ':')
	c.out = strconv.AppendInt(c.out, n, 10)
	c.out = append(c.out, '\r', '\n')
}

// WriteUint64 writes an integer, capped at the largest RESP integer.
func (c *conn) WriteUint64(n uint64) { c.WriteInt64(int64(min(n, math.MaxInt64))) }

// WriteBulk writes a bulk string.
func (c *conn) WriteBulk(b []byte) {
	c.out = append(c.out, '$')
	c.out = strconv.AppendInt(c.out, int64(len(b)), 10)
	c.out = append(c.out, '\r', '\n')
	c.out = append(c.out, b...)
	c.out = append(c.out, '\r', '\n')
}

// WriteBulkString writes a bulk string.
func (c *conn) WriteBulkString(s string) {
	c.out = append(c.out, '$')
	c.out = strconv.AppendInt(c.out, int64(len(s)), 10)
	c.out = append(c.out, '\r', '\n')
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// WriteNull writes the null reply: "_" in RESP3, a null bulk string in
// RESP2.
func (c *conn) WriteNull() {
	if c.resp3 {
		c.out = append(c.out, '_', '\r', '\n')
		return
	}
	c.out = append(c.out, "$-1\r\n"...)
}

// WriteNullArray writes a null array: "_" in RESP3, "*-1" in RESP2.
func (c *conn) WriteNullArray() {
	if c.resp3 {
		c.out = append(c.out, '_', '\r', '\n')
		return
	}
	c.out = append(c.out, "*-1\r\n"...)
}

func (c *conn) header(kind byte, n int) {
	c.out = append(c.out, kind)
	c.out = strconv.AppendInt(c.out, int64(n), 10)
	c.out = append(c.out, '\r', '\n')
}

// WriteArray writes the header of an array of n values.
func (c *conn) WriteArray(n int) { c.header('*', n) }

// WriteMap writes the header of a map of n pairs: "%" in RESP3, a flat
// array of 2n values in RESP2.
func (c *conn) WriteMap(n int) {
	if c.resp3 {
		c.header('%', n)
		return
	}
	c.header('*', 2*n)
}

// WriteSet writes the header of a set of n values: "~" in RESP3, an array
// in RESP2.
func (c *conn) WriteSet(n int) {
	if c.resp3 {
		c.header('~', n)
		return
	}
	c.header('*', n)
}

// WriteDouble writes a floating-point number: "," in RESP3, a bulk
// string in RESP2 (as Redis answers ZSCORE).
func (c *conn) WriteDouble(f float64) {
	var s []byte
	switch {
	case math.IsInf(f, 1):
		s = []byte("inf")
	case math.IsInf(f, -1):
		s = []byte("-inf")
	case math.IsNaN(f):
		s = []byte("nan")
	default:
		s = strconv.AppendFloat(nil, f, 'g', -1, 64)
	}
	if c.resp3 {
		c.out = append(c.out, ',')
		c.out = append(c.out, s...)
		c.out = append(c.out, '\r', '\n')
		return
	}
	c.WriteBulk(s)
}

// WriteBool writes a boolean: "#t"/"#f" in RESP3, 1/0 in RESP2 (as
// RedisBloom answers BF.ADD).
func (c *conn) WriteBool(b bool) {
	switch {
	case c.resp3 && b:
		c.out = append(c.out, "#t\r\n"...)
	case c.resp3:
		c.out = append(c.out, "#f\r\n"...)
	case b:
		c.out = append(c.out, ":1\r\n"...)
	default:
		c.out = append(c.out, ":0\r\n"...)
	}
}
