package resp

import (
	"fmt"
	"net"
)

// maxInline is the longest inline (telnet-style) command line accepted,
// as in Redis.
const maxInline = 64 << 10

// maxHeader is the longest "*count" or "$length" header line: a 64-bit
// number and then some.
const maxHeader = 32

// Scanner states: where in the RESP framing the next byte falls.
const (
	scanStart    = iota // at a command boundary
	scanCount           // in "*count\r\n"
	scanBulkHdr         // expecting '$'
	scanBulkLen         // in "$length\r\n"
	scanBulkBody        // skipping an argument and its "\r\n"
	scanInline          // in an inline command line
	scanPass            // malformed framing: redcon's parser reports it
)

// limitConn enforces the size limits on a connection's input before
// redcon's parser buffers it: redcon grows its read buffer to hold a
// whole command, so an argument announced as a gigabyte would otherwise
// be buffered as it arrives. limitConn follows the RESP framing as bytes
// pass through Read and, at the first header over a limit, hands redcon
// the complete commands before it, then answers the client with an error
// and fails the next Read, which closes the connection.
type limitConn struct {
	net.Conn
	srv *Server

	state   int
	num     int64 // header number being parsed
	neg     bool
	hdrLen  int   // bytes of the header line so far
	args    int64 // arguments left in the current command
	cmdSize int64 // argument bytes of the current command so far
	skip    int64 // bytes left of the current argument, "\r\n" included
	inline  int   // bytes of the current inline line

	fail error // the violation to report at the next Read

	out replyQueue // the replies on their way to the client
}

// Write writes replies through the connection's queue: see replyQueue.
func (c *limitConn) Write(p []byte) (int, error) { return c.out.write(p) }

// Close lets the replies queued go out first (within WriteTimeout, and
// not at all when the server shuts down), then closes the connection.
func (c *limitConn) Close() error {
	wait := c.srv.cfg.WriteTimeout
	if c.srv.closing.Load() {
		wait = 0
	}
	return c.out.close(wait)
}

// errLimit is a request over one of the server's limits.
type errLimit struct{ msg string }

func (e *errLimit) Error() string { return e.msg }

// Read reads from the connection and checks the framing of what it read.
func (c *limitConn) Read(p []byte) (int, error) {
	if c.fail != nil {
		return 0, c.refuse()
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.srv.netInput.Add(uint64(n))
		if at, bad := c.scan(p[:n]); bad != nil {
			c.fail = bad
			if at == 0 {
				return 0, c.refuse()
			}
			// The commands before the offending one are served first.
			return at, nil
		}
	}
	return n, err
}

// refuse answers the pending violation and fails the read.
func (c *limitConn) refuse() error {
	c.srv.rejectedRequests.Add(1)
	_, _ = c.Write([]byte("-ERR Protocol error: " + c.fail.Error() + "\r\n"))
	return c.fail
}

// scan advances the framing state over b. On a violation it returns the
// offset of the offending byte and the error.
func (c *limitConn) scan(b []byte) (int, error) {
	lim := &c.srv.cfg
	for i := 0; i < len(b); i++ {
		ch := b[i]
		switch c.state {
		case scanPass:
			return len(b), nil
		case scanStart:
			if ch == '*' {
				c.state, c.num, c.neg, c.hdrLen = scanCount, 0, false, 0
			} else {
				c.state, c.inline = scanInline, 1
				if ch == '\n' {
					c.state = scanStart
				}
			}
		case scanInline:
			c.inline++
			if ch == '\n' {
				c.state = scanStart
			} else if c.inline > maxInline {
				return i, &errLimit{fmt.Sprintf("inline command longer than %d bytes", maxInline)}
			}
		case scanCount, scanBulkLen:
			c.hdrLen++
			switch {
			case ch >= '0' && ch <= '9':
				c.num = c.num*10 + int64(ch-'0')
				if c.hdrLen > maxHeader || c.num > 1<<40 {
					return i, &errLimit{"header number too large"}
				}
			case ch == '-' && c.hdrLen == 1:
				c.neg = true
			case ch == '\r':
			case ch == '\n':
				if c.neg || c.num <= 0 && c.state == scanCount {
					c.state = scanPass // redcon answers the bad length
					continue
				}
				if c.state == scanCount {
					if c.num > int64(lim.MaxArgs) {
						return i, &errLimit{fmt.Sprintf("command of %d arguments exceeds max-args %d", c.num, lim.MaxArgs)}
					}
					c.args, c.cmdSize, c.state = c.num, 0, scanBulkHdr
					continue
				}
				if c.num > int64(lim.MaxArgSize) {
					return i, &errLimit{fmt.Sprintf("argument of %d bytes exceeds max-arg-size %d", c.num, lim.MaxArgSize)}
				}
				c.cmdSize += c.num
				if c.cmdSize > int64(lim.MaxCommandSize) {
					return i, &errLimit{fmt.Sprintf("command of more than %d bytes exceeds max-command-size %d", c.cmdSize, lim.MaxCommandSize)}
				}
				c.skip, c.state = c.num+2, scanBulkBody
			default:
				c.state = scanPass
			}
		case scanBulkHdr:
			if ch != '$' {
				c.state = scanPass
				continue
			}
			c.state, c.num, c.neg, c.hdrLen = scanBulkLen, 0, false, 0
		case scanBulkBody:
			// Skip the rest of the argument at once.
			k := min(c.skip, int64(len(b)-i))
			c.skip -= k
			i += int(k) - 1
			if c.skip == 0 {
				c.args--
				if c.args == 0 {
					c.state = scanStart
				} else {
					c.state = scanBulkHdr
				}
			}
		}
	}
	return len(b), nil
}
