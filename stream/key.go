package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// rejectCode says why a line was rejected.
type rejectCode uint8

const (
	rejNone         rejectCode = iota
	rejNotJSON                 // syntax error; detail in the reject
	rejNotObject               // valid JSON, but not an object
	rejMissingKey              // a key field is absent or null
	rejKeyTooLarge             // key over --max-key
	rejEmptyKey                // key of zero bytes, or a JSON member ""
	rejNoMatch                 // --regex did not match
	rejMissingField            // --field N beyond the line's fields
	rejLineTooLong             // line over --max-line
	rejEmptyLine               // json: a blank line
	rejMissingTime             // --time-field absent, null or empty
	rejBadTime                 // --time-field not a time; text in the reject
)

// reject describes one rejected line; String formats it for the rejects
// stream. It is a value without pointers so that good lines cost nothing.
type reject struct {
	code  rejectCode
	field int // rejMissingKey: index of the missing path
	size  int // rejKeyTooLarge, rejLineTooLong: the size found
	json  jsonError
	text  string // rejBadTime: the value found
}

// describe formats r for the rejects stream, naming fields from x.
func (r reject) describe(x *Keyer) string {
	switch r.code {
	case rejNotJSON:
		return "not JSON: " + r.json.String()
	case rejNotObject:
		return "not a JSON object"
	case rejMissingKey:
		return "missing key " + strconv.Quote(strings.Join(x.paths[r.field], "."))
	case rejKeyTooLarge:
		return fmt.Sprintf("key too large: %d bytes, limit %d", r.size, x.maxKey)
	case rejEmptyKey:
		if x.mode == modeJSON {
			return "empty key " + strconv.Quote(strings.Join(x.paths[r.field], "."))
		}
		return "empty key"
	case rejEmptyLine:
		return "empty line"
	case rejNoMatch:
		return "no match for --regex"
	case rejMissingField:
		return fmt.Sprintf("no field %d", x.field)
	case rejLineTooLong:
		return fmt.Sprintf("line too long: %d bytes or more, limit %d", r.size, x.maxLine)
	case rejMissingTime, rejBadTime:
		return r.timeText(x)
	}
	return "rejected"
}

// keyMode is how the key is taken from a line.
type keyMode uint8

const (
	modeJSON  keyMode = iota // --key paths of an NDJSON object
	modeLine                 // the whole line
	modeField                // --field N of --delim separated fields
	modeRegex                // the first group of --regex
)

// Keyer takes the key (and with [TimeConfig] the event time) out of a
// line. It is not safe for concurrent use (it holds the JSON scanner's
// state); one goroutine owns it, others take a [Keyer.Clone].
type Keyer struct {
	mode    keyMode
	paths   []jsonPath
	scan    *jsonScanner
	field   int // 1-based
	delim   []byte
	re      *regexp.Regexp
	group   int // capture group of re, 0 for the whole match
	maxKey  int
	maxLine int
	// With --time-field (eventtime.go): timed; in JSON mode the time's
	// path is paths[nkeys], after the key paths; with --format lines it is
	// field timeField of timeDelim separated fields.
	timed     bool
	nkeys     int
	timeUnit  int64 // ns per unit, 0: by magnitude
	timeName  string
	timeField int
	timeDelim []byte
}

// Clone returns a Keyer like x with its own scanner state, for another
// goroutine.
func (x *Keyer) Clone() *Keyer {
	c := *x
	if x.scan != nil {
		c.scan = newJSONScanner(x.paths)
	}
	return &c
}

// KeyConfig says where a line's key is, as the flags of dedup filter do
// (its errors name them).
type KeyConfig struct {
	// Format is "json" (NDJSON, one object per line) or "lines".
	Format string
	// Key is, for json, the key paths, comma-separated, each dotted from
	// the top of the object (--key: "event_id", "user.id,user.seq").
	Key string
	// Field is, for lines, the key's field, from 1, of Delim separated
	// fields (--field); 0 with FieldSet false is the whole line.
	Field int
	// FieldSet says Field was given: Field 0 is then an error, not "no
	// field".
	FieldSet bool
	// Delim is the field delimiter for Field (--delim).
	Delim string
	// Regex is, for lines, a regular expression whose first group (or
	// match) is the key (--regex).
	Regex string
	// MaxKey is the largest key in bytes; a longer one is rejected
	// (--max-key). It must be at least 1.
	MaxKey int
	// MaxLine is the longest line in bytes; a longer one is rejected
	// (--max-line).
	MaxLine int
}

// NewKeyer returns the key extractor cfg describes, or an error naming
// the flag of dedup filter that is wrong. A Keyer is not safe for
// concurrent use: give each goroutine its own [Keyer.Clone].
func NewKeyer(cfg KeyConfig) (*Keyer, error) {
	x := &Keyer{maxKey: cfg.MaxKey, maxLine: cfg.MaxLine}
	switch cfg.Format {
	case "json", "ndjson":
		if cfg.Key == "" {
			return nil, errors.New("--format json needs --key (e.g. --key event_id or --key user.id,seq)")
		}
		if cfg.FieldSet || cfg.Field != 0 || cfg.Regex != "" {
			return nil, errors.New("--field and --regex go with --format lines")
		}
		paths, err := parsePaths(cfg.Key)
		if err != nil {
			return nil, err
		}
		x.mode, x.paths, x.scan = modeJSON, paths, newJSONScanner(paths)
	case "lines":
		if cfg.Key != "" {
			return nil, errors.New("--key goes with --format json; use --field or --regex with --format lines")
		}
		switch {
		case (cfg.FieldSet || cfg.Field != 0) && cfg.Regex != "":
			return nil, errors.New("--field and --regex are exclusive")
		case cfg.Field < 0 || (cfg.FieldSet && cfg.Field == 0):
			return nil, fmt.Errorf("--field %d: fields count from 1", cfg.Field)
		case cfg.Field > 0:
			if cfg.Delim == "" {
				return nil, errors.New("--delim must not be empty")
			}
			x.mode, x.field, x.delim = modeField, cfg.Field, []byte(cfg.Delim)
		case cfg.Regex != "":
			re, err := regexp.Compile(cfg.Regex)
			if err != nil {
				return nil, fmt.Errorf("--regex: %w", err)
			}
			x.mode, x.re = modeRegex, re
			if re.NumSubexp() > 0 {
				x.group = 1
			}
		default:
			x.mode = modeLine
		}
	default:
		return nil, fmt.Errorf("--format %q: want json or lines", cfg.Format)
	}
	return x, nil
}

// parsePaths splits "user.id,seq" into paths. Member names containing '.'
// or ',' cannot be named.
func parsePaths(spec string) ([]jsonPath, error) {
	var paths []jsonPath
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("--key %q: empty field", spec)
		}
		p := jsonPath(strings.Split(f, "."))
		for _, name := range p {
			if name == "" {
				return nil, fmt.Errorf("--key %q: empty member name in %q", spec, f)
			}
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Key returns the key of line. A composite or unescaped key is built in
// arena, which it returns grown; otherwise key aliases line. A line
// without a usable key gives an error matching [ErrRejected] that says
// why ("missing key user.id").
func (x *Keyer) Key(line, arena []byte) (key, arenaOut []byte, err error) {
	key, arena, r := x.extract(line, arena)
	if r.code != rejNone {
		return nil, arena, rejected(errors.New(r.describe(x)))
	}
	return key, arena, nil
}

// extract returns the key of line (without its newline). The key aliases
// line, or arena when it has several fields; the grown arena is returned.
// A rejected line has r.code != rejNone.
func (x *Keyer) extract(line, arena []byte) (key, arenaOut []byte, r reject) {
	switch x.mode {
	case modeJSON:
		ok, notObject := x.scan.scan(line)
		if !ok {
			if len(bytes.TrimSpace(line)) == 0 {
				return nil, arena, reject{code: rejEmptyLine}
			}
			return nil, arena, reject{code: rejNotJSON, json: x.scan.err}
		}
		if notObject {
			return nil, arena, reject{code: rejNotObject}
		}
		vals := x.scan.vals
		if x.timed {
			vals = vals[:x.nkeys]
		}
		for i, v := range vals {
			if v == nil {
				return nil, arena, reject{code: rejMissingKey, field: i}
			}
		}
		// An empty string identifies nothing: every line with it would
		// share one key. (Its raw text, "", is never empty itself.)
		for i, v := range vals {
			if len(v) == 2 && v[0] == '"' && v[1] == '"' {
				return nil, arena, reject{code: rejEmptyKey, field: i}
			}
		}
		if len(vals) == 1 {
			key = vals[0]
		} else {
			// Composite: each field's raw text, length-prefixed, so that
			// ("a,b","c") and ("a","b,c"), or 1,23 and 12,3, differ.
			start := len(arena)
			for _, v := range vals {
				arena = binary.AppendUvarint(arena, uint64(len(v)))
				arena = append(arena, v...)
			}
			key = arena[start:len(arena):len(arena)]
		}
	case modeLine:
		key = trimCR(line)
	case modeField:
		key = trimCR(line)
		for i := 1; i < x.field; i++ {
			j := bytes.Index(key, x.delim)
			if j < 0 {
				return nil, arena, reject{code: rejMissingField}
			}
			key = key[j+len(x.delim):]
		}
		if j := bytes.Index(key, x.delim); j >= 0 {
			key = key[:j]
		}
	case modeRegex:
		m := x.re.FindSubmatchIndex(line)
		if m == nil || m[2*x.group] < 0 {
			return nil, arena, reject{code: rejNoMatch}
		}
		key = line[m[2*x.group]:m[2*x.group+1]]
	}
	if len(key) == 0 {
		return nil, arena, reject{code: rejEmptyKey}
	}
	if len(key) > x.maxKey {
		return nil, arena, reject{code: rejKeyTooLarge, size: len(key)}
	}
	return key, arena, reject{}
}

func trimCR(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}
