package resp

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// The request reader is the server's own rather than a library's: it
// keeps one connection's memory bounded by the size limits whatever the
// client sends. Its buffer starts at readSize, moves the unread bytes to
// its front before every read (so a client streaming commands that
// straddle reads never makes it grow), grows only to hold one command the
// limits admit, and shrinks back once that command is served. It follows
// the framing byte by byte and refuses a request at the first byte that
// cannot belong to a valid one, before it buffers more of it.

const (
	// readSize is the size of a connection's read buffer between large
	// commands, and of one read.
	readSize = 16 << 10
	// maxInline is the longest inline (telnet-style) command line
	// accepted, as in Redis.
	maxInline = 64 << 10
	// maxHeader is the longest "*count" or "$length" header line, "\r\n"
	// included: a 64-bit number and then some.
	maxHeader = 32
	// maxHeaderNum bounds the number a header may announce before the
	// limits of the Options are checked against it.
	maxHeaderNum = 1 << 40
)

// protoError is a request the server refuses: it is answered
// "-ERR Protocol error: " and the message, and its connection is closed.
type protoError struct{ msg string }

func (e *protoError) Error() string { return "Protocol error: " + e.msg }

// reqLimits are the bounds a request must keep (see [Options]).
type reqLimits struct {
	maxArgSize, maxArgs, maxCommandSize int64
}

// reqReader reads a connection's commands. The arguments next returns
// are views into its buffer, valid until the following call.
type reqReader struct {
	rd  io.Reader
	lim reqLimits
	buf []byte
	r   int // the current command starts at buf[r]
	w   int // bytes read end at buf[w]
	in  *uint64

	// The multibulk command being parsed, offsets relative to r, so that
	// moving the buffer's contents keeps them valid and a command that
	// arrives in many reads is parsed once.
	p     int   // where parsing resumes
	nargs int64 // arguments announced; 0 until the header is parsed
	spans []int // start and end of each argument parsed
	size  int64 // argument bytes announced so far
	arg   int64 // length of the argument being read, -1 when none
	need  int   // bytes from r the command needs at least
	args  [][]byte
	// inline holds the arguments of an inline command, unquoted.
	inline []byte
}

func newReqReader(rd io.Reader, lim reqLimits, in *uint64) *reqReader {
	return &reqReader{rd: rd, lim: lim, buf: make([]byte, readSize), arg: -1, in: in}
}

// next returns the next command's arguments. Before a read that may
// block it calls flush, so that the replies of the commands served are
// written while the client is not sending more. It returns a
// [*protoError] for a request it refuses, or the read's error.
func (q *reqReader) next(flush func() error) ([][]byte, error) {
	for {
		args, ok, err := q.parse()
		if err != nil {
			return nil, err
		}
		if ok {
			if args == nil {
				continue // an empty multibulk or inline line: ignored, as Redis does
			}
			return args, nil
		}
		if err := flush(); err != nil {
			return nil, err
		}
		if err := q.fill(); err != nil {
			return nil, err
		}
	}
}

// fill reads more bytes, first moving the current command to the front
// of the buffer, and growing the buffer only when that command fills it.
func (q *reqReader) fill() error {
	if q.r == q.w && len(q.buf) > readSize {
		// A large command was served: let its buffer go.
		q.buf, q.r, q.w = make([]byte, readSize), 0, 0
	}
	if q.r > 0 {
		q.w = copy(q.buf, q.buf[q.r:q.w])
		q.r = 0
	}
	if q.w == len(q.buf) {
		// One command fills the buffer; the limits checked as its headers
		// came bound how far this goes.
		nb := make([]byte, max(2*len(q.buf), q.need))
		copy(nb, q.buf[:q.w])
		q.buf = nb
	}
	n, err := q.rd.Read(q.buf[q.w:])
	q.w += n
	if q.in != nil {
		*q.in += uint64(n)
	}
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// parse parses what is buffered. ok is false when the command is not
// complete yet; args is nil for an empty command, which is skipped.
func (q *reqReader) parse() (args [][]byte, ok bool, err error) {
	b := q.buf[q.r:q.w]
	if len(b) == 0 {
		return nil, false, nil
	}
	if b[0] != '*' {
		return q.parseInline(b)
	}
	if q.nargs == 0 {
		n, used, err := parseHeader(b, '*', "multibulk")
		if err != nil || used == 0 {
			return nil, false, err
		}
		if n <= 0 {
			// "*0" and "*-1" are skipped, as Redis does.
			q.r += used
			return nil, true, nil
		}
		if n > q.lim.maxArgs {
			return nil, false, &protoError{fmt.Sprintf("command of %d arguments exceeds max-args %d", n, q.lim.maxArgs)}
		}
		q.nargs, q.p, q.spans, q.size = n, used, q.spans[:0], 0
	}
	for int64(len(q.spans)/2) < q.nargs {
		if q.arg < 0 {
			n, used, err := parseHeader(b[q.p:], '$', "bulk")
			if err != nil || used == 0 {
				return nil, false, err
			}
			if n < 0 {
				return nil, false, &protoError{"invalid bulk length"}
			}
			if n > q.lim.maxArgSize {
				return nil, false, &protoError{fmt.Sprintf("argument of %d bytes exceeds max-arg-size %d", n, q.lim.maxArgSize)}
			}
			q.size += n
			if q.size > q.lim.maxCommandSize {
				return nil, false, &protoError{fmt.Sprintf("command of more than %d bytes exceeds max-command-size %d", q.size, q.lim.maxCommandSize)}
			}
			q.arg, q.p = n, q.p+used
		}
		if int64(len(b)-q.p) < q.arg+2 {
			q.need = q.p + int(q.arg) + 2
			return nil, false, nil
		}
		end := q.p + int(q.arg)
		if b[end] != '\r' || b[end+1] != '\n' {
			return nil, false, &protoError{"expected '\\r\\n' after an argument"}
		}
		q.spans = append(q.spans, q.p, end)
		q.p, q.arg = end+2, -1
	}
	if cap(q.args) > 1024 && int64(len(q.spans)/2) < 64 {
		// A large command was served: a small one needs no such array.
		q.args = nil
	}
	q.args = q.args[:0]
	for i := 0; i < len(q.spans); i += 2 {
		q.args = append(q.args, b[q.spans[i]:q.spans[i+1]:q.spans[i+1]])
	}
	q.r += q.p
	q.nargs, q.p, q.need = 0, 0, 0
	if cap(q.spans) > 2048 {
		q.spans = nil
	}
	if cap(q.inline) > readSize {
		q.inline = nil
	}
	return q.args, true, nil
}

// parseHeader parses a "*count\r\n" or "$length\r\n" line at the start of
// b, whose first byte is to be lead. used is 0 when the line is not
// complete yet. Every byte is checked as it comes: one that cannot be part
// of the line fails at once, so that no malformed header is buffered.
func parseHeader(b []byte, lead byte, what string) (n int64, used int, err error) {
	bad := func() (int64, int, error) {
		return 0, 0, &protoError{"invalid " + what + " length"}
	}
	if len(b) == 0 {
		return 0, 0, nil
	}
	if b[0] != lead {
		return 0, 0, &protoError{fmt.Sprintf("expected '%c', got '%s'", lead, printable(b[0]))}
	}
	neg, digits := false, 0
	for i := 1; i < len(b); i++ {
		if i >= maxHeader {
			return 0, 0, &protoError{what + " length line longer than " + strconv.Itoa(maxHeader) + " bytes"}
		}
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			n = n*10 + int64(c-'0')
			digits++
			if n > maxHeaderNum {
				return 0, 0, &protoError{"header number too large"}
			}
		case c == '-' && i == 1:
			neg = true
		case c == '\r' && digits > 0:
			if i+1 == len(b) {
				return 0, 0, nil
			}
			if b[i+1] != '\n' {
				return bad()
			}
			if neg {
				n = -n
			}
			return n, i + 2, nil
		default:
			return bad()
		}
	}
	return 0, 0, nil
}

// printable shows a byte in an error message.
func printable(c byte) string {
	if c < ' ' || c > '~' {
		return fmt.Sprintf("\\x%02x", c)
	}
	return string(c)
}

// parseInline parses a telnet-style line at the start of b.
func (q *reqReader) parseInline(b []byte) ([][]byte, bool, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > maxInline {
			return nil, false, &protoError{fmt.Sprintf("inline command longer than %d bytes", maxInline)}
		}
		return nil, false, nil
	}
	if i > maxInline {
		return nil, false, &protoError{fmt.Sprintf("inline command longer than %d bytes", maxInline)}
	}
	line := b[:i]
	q.r += i + 1
	line = bytes.TrimSuffix(line, []byte{'\r'})
	var err error
	q.inline, q.spans, err = splitArgs(line, q.inline[:0], q.spans[:0])
	if err != nil {
		return nil, false, err
	}
	q.args = q.args[:0]
	for i := 0; i < len(q.spans); i += 2 {
		q.args = append(q.args, q.inline[q.spans[i]:q.spans[i+1]:q.spans[i+1]])
	}
	args := q.args
	if int64(len(args)) > q.lim.maxArgs {
		return nil, false, &protoError{fmt.Sprintf("command of %d arguments exceeds max-args %d", len(args), q.lim.maxArgs)}
	}
	if len(args) == 0 {
		return nil, true, nil
	}
	return args, true, nil
}

// splitArgs splits an inline command line as Redis's sdssplitargs does:
// arguments separated by spaces, "double quoted" with \n \r \t \b \a \\
// \" and \xHH escapes, or 'single quoted' with \' only; a closing quote
// must be followed by a space or the end of the line. The arguments are
// appended to buf, their start and end offsets to spans.
func splitArgs(line, buf []byte, spans []int) ([]byte, []int, error) {
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return buf, spans, nil
		}
		start := len(buf)
		cur := buf
		inq, insq, done := false, false, false
		for !done {
			if i == len(line) {
				if inq || insq {
					return nil, nil, &protoError{"unbalanced quotes in request"}
				}
				break
			}
			c := line[i]
			switch {
			case inq:
				switch {
				case c == '\\' && i+3 < len(line) && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
					cur = append(cur, unhex(line[i+2])<<4|unhex(line[i+3]))
					i += 3
				case c == '\\' && i+1 < len(line):
					i++
					switch e := line[i]; e {
					case 'n':
						cur = append(cur, '\n')
					case 'r':
						cur = append(cur, '\r')
					case 't':
						cur = append(cur, '\t')
					case 'b':
						cur = append(cur, '\b')
					case 'a':
						cur = append(cur, '\a')
					default:
						cur = append(cur, e)
					}
				case c == '"':
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, nil, &protoError{"unbalanced quotes in request"}
					}
					done = true
				default:
					cur = append(cur, c)
				}
			case insq:
				switch {
				case c == '\\' && i+1 < len(line) && line[i+1] == '\'':
					i++
					cur = append(cur, '\'')
				case c == '\'':
					if i+1 < len(line) && !isSpace(line[i+1]) {
						return nil, nil, &protoError{"unbalanced quotes in request"}
					}
					done = true
				default:
					cur = append(cur, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			i++
		}
		buf = cur
		spans = append(spans, start, len(buf))
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
