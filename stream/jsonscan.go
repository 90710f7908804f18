package stream

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// This file holds a small validating scanner of one JSON object per line
// that records the raw text of the members named by dotted paths.
//
// Why not encoding/json: key extraction is on the path of every event, and
// encoding/json allocates per line (json.Unmarshal into a map of
// json.RawMessage, or json.Decoder's tokens) at a small fraction of this
// scanner's speed (BenchmarkExtractJSON in key_test.go compares them).
// This scanner does not allocate and validates the whole line, so a line
// it accepts is valid JSON per RFC 8259 (like encoding/json's Valid, it
// does not check UTF-8).
//
// How it is fast: the position lives in a local (each step takes and
// returns an index, which stays in a register), a string without escapes
// is read eight bytes at a time to its quote (swarSpecial), and a member
// whose name has no wanted length skips the name comparison (lenBit).

// maxDepth bounds the nesting of a line, as encoding/json does.
const maxDepth = 10000

// jsonPath is one dotted path, split into member names.
type jsonPath []string

// pathNode is a level of the trie of wanted paths: the members wanted in
// an object at this level.
type pathNode struct {
	members []pathMember
	// lens has bit n set if a member name of n bytes (n < 64; bit 63 for
	// all longer ones) is wanted: most member names of a line are not,
	// and their length alone says so without a call to match.
	lens uint64
}

// lenBit is the bit of lens for a name of n bytes.
func lenBit(n int) uint64 { return 1 << min(n, 63) }

type pathMember struct {
	name  string
	field int       // index of the path ending here, -1 if none
	child *pathNode // deeper paths through this member, nil if none
}

// newPathTrie builds the trie of paths; path i's raw value lands in
// vals[i] of scan.
func newPathTrie(paths []jsonPath) *pathNode {
	root := &pathNode{}
	for i, p := range paths {
		n := root
		for d, name := range p {
			var m *pathMember
			for j := range n.members {
				if n.members[j].name == name {
					m = &n.members[j]
					break
				}
			}
			if m == nil {
				n.members = append(n.members, pathMember{name: name, field: -1})
				n.lens |= lenBit(len(name))
				m = &n.members[len(n.members)-1]
			}
			if d == len(p)-1 {
				m.field = i
			} else {
				if m.child == nil {
					m.child = &pathNode{}
				}
				n = m.child
			}
		}
	}
	return root
}

// jsonError is a syntax error: what was found where.
type jsonError struct {
	at  int    // byte offset in the line
	msg string // static description
}

// String formats the error for a reject record.
func (e *jsonError) String() string {
	return e.msg + " at byte " + strconv.Itoa(e.at)
}

// jsonScanner scans one line. It is reused across lines.
//
// Its steps take the index where they start and return the index past
// what they scanned, or -1 after recording a failure with fail: the
// position stays in a register instead of a field written back at every
// byte.
type jsonScanner struct {
	root *pathNode
	vals [][]byte // raw value per path, nil if absent
	err  jsonError
}

func newJSONScanner(paths []jsonPath) *jsonScanner {
	return &jsonScanner{root: newPathTrie(paths), vals: make([][]byte, len(paths))}
}

// scan validates line as one JSON object (surrounding whitespace allowed)
// and fills s.vals with the raw text of each wanted path (nil when
// absent, and nil when the value is null). If a member repeats, the last
// one wins, as with encoding/json. It reports false on a syntax error,
// described by s.err; notObject reports a valid line that is not an object.
func (s *jsonScanner) scan(line []byte) (ok, notObject bool) {
	clear(s.vals)
	d := line
	i := ws(d, 0)
	want, what := s.root, "unexpected data after the object"
	if i < len(d) && d[i] != '{' {
		want, what = nil, "unexpected data after the value"
	}
	if i = s.value(d, i, want, 0); i < 0 {
		return false, false
	}
	if i = ws(d, i); i != len(d) {
		s.fail(i, what)
		return false, false
	}
	return true, want == nil
}

// fail records a syntax error at byte at and returns -1.
func (s *jsonScanner) fail(at int, msg string) int {
	s.err = jsonError{at: at, msg: msg}
	return -1
}

// ws skips JSON whitespace from i. Most NDJSON has none between tokens:
// the first byte, past ' ', ends it.
func ws(d []byte, i int) int {
	if i < len(d) && d[i] > ' ' {
		return i
	}
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// value scans one value at i. want, when non-nil, names the members to
// record if the value is an object.
func (s *jsonScanner) value(d []byte, i int, want *pathNode, depth int) int {
	if i >= len(d) {
		return s.fail(i, "unexpected end of line")
	}
	switch c := d[i]; {
	case c == '"':
		i, _ = s.str(d, i)
		return i
	case c == '{':
		return s.object(d, i, want, depth+1)
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(d, i)
	case c == '[':
		return s.array(d, i, depth+1)
	case c == 't':
		return s.literal(d, i, "true")
	case c == 'f':
		return s.literal(d, i, "false")
	case c == 'n':
		return s.literal(d, i, "null")
	default:
		return s.fail(i, "unexpected character "+strconv.QuoteRune(rune(c)))
	}
}

func (s *jsonScanner) literal(d []byte, i int, lit string) int {
	if len(d)-i >= len(lit) && string(d[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return s.fail(i, "invalid literal")
}

// enter steps into an object or array at depth, whose opening bracket is
// at i: past it and the whitespace after it. more reports whether there
// are members to scan: false if the nesting is too deep (a failure, i -1)
// or if closer follows at once (an empty container, consumed).
func (s *jsonScanner) enter(d []byte, i, depth int, closer byte) (next int, more bool) {
	if depth > maxDepth {
		return s.fail(i, "nesting too deep"), false
	}
	i = ws(d, i+1)
	if i < len(d) && d[i] == closer {
		return i + 1, false
	}
	return i, true
}

func (s *jsonScanner) object(d []byte, i int, want *pathNode, depth int) int {
	i, more := s.enter(d, i, depth, '}')
	if !more {
		return i
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return s.fail(i, "expected a member name")
		}
		nameStart := i + 1
		var escaped bool
		if i, escaped = s.str(d, i); i < 0 {
			return i
		}
		var m *pathMember
		// An escaped name may be longer than what it decodes to.
		if want != nil && (escaped || want.lens&lenBit(i-1-nameStart) != 0) {
			m = want.match(d[nameStart:i-1], escaped)
		}
		if i = ws(d, i); i >= len(d) || d[i] != ':' {
			return s.fail(i, "expected ':'")
		}
		start := ws(d, i+1)
		var child *pathNode
		if m != nil {
			child = m.child
		}
		if i = s.value(d, start, child, depth); i < 0 {
			return i
		}
		if m != nil && m.field >= 0 {
			v := d[start:i]
			if string(v) == "null" {
				v = nil
			}
			s.vals[m.field] = v
		}
		if i = ws(d, i); i >= len(d) {
			return s.fail(i, "unexpected end of line in an object")
		}
		switch d[i] {
		case ',':
			i = ws(d, i+1)
		case '}':
			return i + 1
		default:
			return s.fail(i, "expected ',' or '}'")
		}
	}
}

// match finds the wanted member called name (raw, between the quotes).
func (n *pathNode) match(name []byte, escaped bool) *pathMember {
	if escaped {
		u, ok := unquoteJSON(name)
		if !ok {
			return nil
		}
		name = u
	}
	for j := range n.members {
		if n.members[j].name == string(name) {
			return &n.members[j]
		}
	}
	return nil
}

func (s *jsonScanner) array(d []byte, i, depth int) int {
	i, more := s.enter(d, i, depth, ']')
	if !more {
		return i
	}
	for {
		if i = s.value(d, i, nil, depth); i < 0 {
			return i
		}
		if i = ws(d, i); i >= len(d) {
			return s.fail(i, "unexpected end of line in an array")
		}
		switch d[i] {
		case ',':
			i = ws(d, i+1)
		case ']':
			return i + 1
		default:
			return s.fail(i, "expected ',' or ']'")
		}
	}
}

// strPlain marks the bytes that need no attention inside a string.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// swarSpecial flags, in the high bit of each byte of w, the bytes that
// end a plain run in a string: '"', '\\' or a control character (SWAR:
// the classic has-zero-byte and has-less tests). The lowest flagged byte is
// exact (a borrow only runs upwards from a true match).
func swarSpecial(w uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := w ^ (lo * '"')
	b := w ^ (lo * '\\')
	return ((q-lo)&^q | (b-lo)&^b | (w-lo*0x20)&^w) & hi
}

// str scans a string starting at its opening quote at i and reports
// whether it held an escape.
//
// The common string, without escapes, is read eight bytes at a time to
// its closing quote. The words may run past the line into its slice's
// capacity, which in a batch holds the newline and the next lines: a
// flagged byte at or past len(d) means the line ended inside the string.
func (s *jsonScanner) str(d []byte, i int) (next int, escaped bool) {
	i++ // '"'
	for full := d[:cap(d)]; i+8 <= len(full); i += 8 {
		w := binary.LittleEndian.Uint64(full[i:])
		if m := swarSpecial(w); m != 0 {
			k := bits.TrailingZeros64(m) &^ 7 // the flagged byte's first bit
			if i += k >> 3; i < len(d) && byte(w>>k) == '"' {
				return i + 1, false
			}
			break
		}
	}
	return s.strRest(d, min(i, len(d)))
}

// strRest goes on with a string from i, where an escape, a control
// character or the end of the line is, or fewer than eight bytes are left.
func (s *jsonScanner) strRest(d []byte, i int) (next int, escaped bool) {
	for {
		// Eight bytes at a time while none is flagged, then jump to the
		// flagged one.
		found := false
		for i+8 <= len(d) {
			if m := swarSpecial(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				found = true
				break
			}
			i += 8
		}
		if !found {
			for i < len(d) && strPlain[d[i]] {
				i++
			}
		}
		if i >= len(d) {
			return s.fail(i, "unexpected end of line in a string"), escaped
		}
		switch d[i] {
		case '"':
			return i + 1, escaped
		case '\\':
			escaped = true
			i++
			if i >= len(d) {
				return s.fail(i, "unexpected end of line in a string"), escaped
			}
			switch {
			case jsonEscapes[d[i]] != 0:
				i++
			case d[i] == 'u':
				if len(d)-i < 5 || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					return s.fail(i, "invalid \\u escape"), escaped
				}
				i += 5
			default:
				return s.fail(i, "invalid escape"), escaped
			}
		default: // control character
			return s.fail(i, "control character in a string"), escaped
		}
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *jsonScanner) number(d []byte, i int) int {
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return s.fail(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return s.fail(i, "invalid number")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return s.fail(i, "invalid number")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	return i
}

// jsonEscapes maps the byte after a backslash in a JSON string to the
// byte it stands for; 0 for u (four hex digits follow) and for bytes
// that are not escapes.
var jsonEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unquoteJSON decodes the escapes of a string body already validated by
// str. Invalid surrogates become U+FFFD, as in encoding/json.
func unquoteJSON(b []byte) ([]byte, bool) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(b) {
			return nil, false
		}
		switch e := b[i+1]; {
		case jsonEscapes[e] != 0:
			out = append(out, jsonEscapes[e])
		case e == 'u':
			r, ok := hex4(b[i+2:])
			if !ok {
				return nil, false
			}
			i += 6
			if r >= 0xD800 && r < 0xDC00 {
				// A high surrogate: pair it with a following low one.
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if r2, ok := hex4(b[i+2:]); ok && r2 >= 0xDC00 && r2 < 0xE000 {
						r = (r-0xD800)<<10 + (r2 - 0xDC00) + 0x10000
						i += 6
						out = utf8.AppendRune(out, r)
						continue
					}
				}
				r = utf8.RuneError
			} else if r >= 0xDC00 && r < 0xE000 {
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, false
		}
		i += 2
	}
	return out, true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
