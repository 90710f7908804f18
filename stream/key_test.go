package stream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/streamdedup/dedup/internal/benchinput"
	"github.com/streamdedup/dedup/internal/cputime"
)

func mustExtractor(t testing.TB, cfg KeyConfig) *Keyer {
	t.Helper()
	if cfg.MaxKey == 0 {
		cfg.MaxKey = 4096
	}
	if cfg.MaxLine == 0 {
		cfg.MaxLine = 1 << 20
	}
	x, err := NewKeyer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// checkAgainstEncodingJSON compares the scanner with encoding/json on one
// line for the top-level member "id".
func checkAgainstEncodingJSON(t *testing.T, line []byte) {
	t.Helper()
	s := newJSONScanner([]jsonPath{{"id"}})
	ok, notObject := s.scan(line)
	if !utf8.Valid(line) {
		return // encoding/json versions differ on invalid UTF-8
	}
	valid := json.Valid(line)
	if ok != valid {
		t.Fatalf("scan(%q) ok=%v (%s), json.Valid=%v", line, ok, s.err.String(), valid)
	}
	if !ok {
		return
	}
	var m map[string]json.RawMessage
	err := json.Unmarshal(line, &m)
	// encoding/json leaves the map nil, without an error, for null.
	if notObject != (err != nil || m == nil) {
		t.Fatalf("scan(%q) notObject=%v, Unmarshal into a map: %v", line, notObject, err)
	}
	if notObject {
		return
	}
	want, found := m["id"]
	if found && string(want) == "null" {
		found = false
	}
	got := s.vals[0]
	if (got != nil) != found || (found && !bytes.Equal(got, want)) {
		t.Fatalf("scan(%q) id=%q, encoding/json says %q (found %v)", line, got, want, found)
	}
}

// checkPastTheLine scans line as a batch holds it, with bytes after it in
// its slice's capacity (which the string scan reads ahead into), and wants
// the same result as on the bare line: for each of a newline, a quote (it
// must not close a string the line left open) and plain bytes after it.
func checkPastTheLine(t *testing.T, line []byte) {
	t.Helper()
	bare := newJSONScanner([]jsonPath{{"id"}})
	ok, notObject := bare.scan(bytes.Clone(line))
	for _, after := range []string{"\n{\"id\":1}\n", `"}`, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"} {
		// Room for the scanner's words to run on past the line.
		buf := append(append(make([]byte, 0, len(line)+len(after)+64), line...), after...)
		s := newJSONScanner([]jsonPath{{"id"}})
		ok2, notObject2 := s.scan(buf[:len(line)])
		if ok2 != ok || notObject2 != notObject || s.err != bare.err || !bytes.Equal(s.vals[0], bare.vals[0]) {
			t.Fatalf("scan(%q) followed by %q in its capacity: ok=%v notObject=%v err=%q id=%q, alone: ok=%v notObject=%v err=%q id=%q",
				line, after, ok2, notObject2, s.err.String(), s.vals[0], ok, notObject, bare.err.String(), bare.vals[0])
		}
	}
}

func TestScanMatchesEncodingJSON(t *testing.T) {
	for _, line := range []string{
		`{"id":1}`, `{"id":"1"}`, ` {"id" : [1,2,{"a":null}] } `, `{"id":null}`, `{}`, `{"a":1,"id":2,"id":3}`,
		`{"i\u0064":"esc"}`, `{"\ud83d\ude00":1,"id":true}`, `{"id":-0.5e+10}`, `{"id":01}`, `{"id":1.}`,
		`{"id":.5}`, `{"id":-}`, `{"id":1e}`, `{"id":"\x"}`, `{"id":"\u12"}`, `{"id":"a` + "\t" + `"}`,
		`{"id":tru}`, `{"id":1,}`, `{,}`, `{"id"}`, `{"id":1}}`, `{"id":1} x`, `[1]`, `"s"`, `12`, ``, ` `,
		`{"id":{"id":1}}`, `{"x":[[[[]]]],"id":"deep"}`, `{"id":"\/\b\f\n\r\t\\\""}`, `{"id":1 2}`,
		`{"a":1,"id":"xxxx`, `{"id":"` + strings.Repeat("x", 20), `{"` + strings.Repeat("x", 12), `"abc`,
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
		`{"a":` + strings.Repeat(`{"a":`, 10001) + `1` + strings.Repeat(`}`, 10002),
	} {
		checkAgainstEncodingJSON(t, []byte(line))
		checkPastTheLine(t, []byte(line))
	}
	// A quote, an escape or a control character at every offset of the
	// scanner's 8-byte words, with data after the string or not.
	for n := range 20 {
		for _, special := range []string{`"`, `\n`, `\u0041`, "\t", `\`, "\x00"} {
			body := strings.Repeat("x", n) + special + strings.Repeat("y", n%9)
			for _, line := range []string{
				`{"id":"` + body + `"}`,
				`{"id":"` + body + `","z":[` + strings.Repeat("1,", n) + `2]}`,
				`{"` + body + `":1,"id":"` + body,
			} {
				checkAgainstEncodingJSON(t, []byte(line))
				checkPastTheLine(t, []byte(line))
			}
		}
	}
}

// FuzzExtract feeds arbitrary lines to every key mode: no panic, keys
// within limits, and the JSON scanner agrees with encoding/json.
func FuzzExtract(f *testing.F) {
	for _, name := range []string{"testdata/events.ndjson", "testdata/access.txt"} {
		fh, err := os.Open(name)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			f.Add(append([]byte{}, sc.Bytes()...))
		}
		fh.Close()
	}
	f.Add([]byte(`{"id":"\ud800","user":{"id":[1,{"x":"y"}]},"seq":1e5}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // the reader never passes a newline
		}
		checkAgainstEncodingJSON(t, line)
		checkPastTheLine(t, line)
		for _, cfg := range []KeyConfig{
			{Format: "json", Key: "event_id"},
			{Format: "json", Key: "user.id,seq"},
			{Format: "lines"},
			{Format: "lines", Field: 3, Delim: ","},
			{Format: "lines", Regex: `id=(\w+)`},
			{Format: "lines", Regex: `[a-z]+`},
		} {
			cfg.MaxKey = 64
			x := mustExtractor(t, cfg)
			key, _, r := x.extract(line, nil)
			if r.code == rejNone {
				if len(key) == 0 || len(key) > 64 {
					t.Fatalf("%+v: key of %d bytes accepted", cfg, len(key))
				}
			} else {
				_ = r.describe(x)
			}
		}
	})
}

func TestCompositeKeysDiffer(t *testing.T) {
	x := mustExtractor(t, KeyConfig{Format: "json", Key: "a,b"})
	keys := map[string]string{}
	for _, line := range []string{
		`{"a":"x,y","b":"z"}`, `{"a":"x","b":"y,z"}`, `{"a":1,"b":23}`, `{"a":12,"b":3}`,
		`{"a":1,"b":"23"}`, `{"a":"1","b":23}`, `{"a":"x","b":"\"\"x"}`, `{"a":"x\"\"","b":"x"}`,
	} {
		k, _, r := x.extract([]byte(line), nil)
		if r.code != rejNone {
			t.Fatalf("%s: rejected: %s", line, r.describe(x))
		}
		if prev, ok := keys[string(k)]; ok {
			t.Errorf("%s and %s make the same key %q", prev, line, k)
		}
		keys[string(k)] = line
	}
}

func TestExtractModes(t *testing.T) {
	cases := []struct {
		cfg  KeyConfig
		line string
		key  string // "" means rejected with code
		code rejectCode
	}{
		{KeyConfig{Format: "json", Key: "id"}, `{"id":"a"}`, `"a"`, 0},
		{KeyConfig{Format: "json", Key: "id"}, `{"id":1}`, `1`, 0},
		{KeyConfig{Format: "json", Key: "u.id"}, `{"u":{"id":true}}`, `true`, 0},
		{KeyConfig{Format: "json", Key: "u.id"}, `{"u":[1]}`, "", rejMissingKey},
		{KeyConfig{Format: "json", Key: "id"}, `{"id":null}`, "", rejMissingKey},
		{KeyConfig{Format: "json", Key: "id"}, `{"id":""}`, "", rejEmptyKey},
		{KeyConfig{Format: "json", Key: "id"}, `{"id" : "" }`, "", rejEmptyKey},
		{KeyConfig{Format: "json", Key: "a,b"}, `{"a":1,"b":""}`, "", rejEmptyKey},
		{KeyConfig{Format: "json", Key: "id"}, `{"id":" "}`, `" "`, 0},
		{KeyConfig{Format: "json", Key: "id"}, `{"id":1`, "", rejNotJSON},
		{KeyConfig{Format: "json", Key: "id"}, `[1]`, "", rejNotObject},
		{KeyConfig{Format: "json", Key: "id"}, `  `, "", rejEmptyLine},
		{KeyConfig{Format: "json", Key: "id", MaxKey: 3}, `{"id":"abcd"}`, "", rejKeyTooLarge},
		{KeyConfig{Format: "lines"}, "abc\r", "abc", 0},
		{KeyConfig{Format: "lines"}, "", "", rejEmptyKey},
		{KeyConfig{Format: "lines", Field: 2, Delim: "::"}, "a::b::c", "b", 0},
		{KeyConfig{Format: "lines", Field: 3, Delim: "::"}, "a::b::c\r", "c", 0},
		{KeyConfig{Format: "lines", Field: 4, Delim: "::"}, "a::b::c", "", rejMissingField},
		{KeyConfig{Format: "lines", Field: 2, Delim: ","}, "a,,c", "", rejEmptyKey},
		{KeyConfig{Format: "lines", Regex: `id=(\w+)`}, "x id=42 y", "42", 0},
		{KeyConfig{Format: "lines", Regex: `id=(\w+)`}, "x id= y", "", rejNoMatch},
		{KeyConfig{Format: "lines", Regex: `\d+`}, "ab 123 c", "123", 0},
		{KeyConfig{Format: "lines", Regex: `(a)|(b)`}, "b", "", rejNoMatch},
	}
	for _, tc := range cases {
		x := mustExtractor(t, tc.cfg)
		key, _, r := x.extract([]byte(tc.line), nil)
		if tc.key != "" {
			if r.code != rejNone || string(key) != tc.key {
				t.Errorf("%+v %q: key %q (%s), want %q", tc.cfg, tc.line, key, r.describe(x), tc.key)
			}
		} else if r.code != tc.code {
			t.Errorf("%+v %q: reject %d (%s), want %d", tc.cfg, tc.line, r.code, r.describe(x), tc.code)
		}
	}
}

func TestExtractorUsage(t *testing.T) {
	for _, cfg := range []KeyConfig{
		{Format: "json"},
		{Format: "json", Key: "a,,b"},
		{Format: "json", Key: "a..b"},
		{Format: "json", Key: "a", Field: 1},
		{Format: "lines", Key: "a"},
		{Format: "lines", Field: 1, Regex: "x"},
		{Format: "lines", Field: -1},
		{Format: "lines", Field: 1, Delim: ""},
		{Format: "lines", Regex: "("},
		{Format: "xml"},
	} {
		if _, err := NewKeyer(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	cp := Checkpoint{Inputs: []string{"/a", "/b"}, Out: "/o", Dups: "/d", File: 1, Offset: 99, Line: 7,
		OutLen: 5, DupsLen: 6, RejectsLen: 0, Counts: Counts{Events: 1, Distinct: 2, Duplicates: 3, Rejects: 4, Bytes: 5}}
	got, err := DecodeCheckpoint(cp.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.sameJob(&cp) || got.File != 1 || got.Offset != 99 || got.Line != 7 || got.OutLen != 5 || got.DupsLen != 6 || got.Counts != cp.Counts {
		t.Fatalf("round trip: %+v, want %+v", got, cp)
	}
	other := cp
	other.Inputs = []string{"/a"}
	if got.sameJob(&other) {
		t.Error("different inputs are the same job")
	}
	for _, bad := range []string{"", "xyz", `{"format":"other"}`, `{"format":"dedup-filter/1","line":0}`,
		`{"format":"dedup-filter/1","inputs":["/a"],"file":2,"line":1}`, `{"format":"dedup-filter/1","offset":-1,"line":1}`} {
		if _, err := DecodeCheckpoint([]byte(bad)); err == nil {
			t.Errorf("DecodeCheckpoint(%q) accepted", bad)
		}
	}
}

// benchLine is a typical clickstream event (~190 bytes).
const benchLine = `{"event_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","ts":"2026-11-29T10:00:00.123Z","user":{"id":123456,"country":"DE"},"seq":42,"type":"click","url":"https://example.com/p/1?ref=abc"}`

func BenchmarkExtractJSON(b *testing.B) {
	line := []byte(benchLine)
	b.Run("scanner", func(b *testing.B) {
		x := mustExtractor(b, KeyConfig{Format: "json", Key: "event_id"})
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		cpu0 := cputime.Process()
		for b.Loop() {
			if _, _, r := x.extract(line, nil); r.code != rejNone {
				b.Fatal(r)
			}
		}
		benchinput.ReportCPU(b, cpu0, int64(b.N*len(line)))
	})
	b.Run("scanner-composite", func(b *testing.B) {
		x := mustExtractor(b, KeyConfig{Format: "json", Key: "user.id,seq"})
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		var arena []byte
		cpu0 := cputime.Process()
		for b.Loop() {
			var r reject
			if _, arena, r = x.extract(line, arena[:0]); r.code != rejNone {
				b.Fatal(r)
			}
		}
		benchinput.ReportCPU(b, cpu0, int64(b.N*len(line)))
	})
	b.Run("unmarshal-map", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		cpu0 := cputime.Process()
		defer func() { benchinput.ReportCPU(b, cpu0, int64(b.N*len(line))) }()
		for b.Loop() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil || m["event_id"] == nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder-tokens", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		cpu0 := cputime.Process()
		defer func() { benchinput.ReportCPU(b, cpu0, int64(b.N*len(line))) }()
		for b.Loop() {
			d := json.NewDecoder(bytes.NewReader(line))
			found := false
			depth := 0
			for {
				tok, err := d.Token()
				if err != nil {
					break
				}
				switch tok := tok.(type) {
				case json.Delim:
					if tok == '{' || tok == '[' {
						depth++
					} else {
						depth--
					}
				case string:
					if depth == 1 && tok == "event_id" {
						found = true
					}
				}
			}
			if !found {
				b.Fatal("not found")
			}
		}
	})
}

// TestScanErrors: a line that is not JSON is rejected with what was found
// and the byte where.
func TestScanErrors(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"a":1`, "unexpected end of line in an object at byte 6"},
		{`{"a":1 `, "unexpected end of line in an object at byte 7"},
		{`{"a":1 ]`, "expected ',' or '}' at byte 7"},
		{`{"a":[1,2`, "unexpected end of line in an array at byte 9"},
		{`{"a":[1 }`, "expected ',' or ']' at byte 8"},
		{`[1,[2] x]`, "expected ',' or ']' at byte 7"},
		{`{"a" 1}`, "expected ':' at byte 5"},
		{`{"a":{} } x`, "unexpected data after the object at byte 10"},
	} {
		s := newJSONScanner([]jsonPath{{"a"}})
		if ok, _ := s.scan([]byte(tc.line)); ok {
			t.Errorf("scan(%q) ok, want %q", tc.line, tc.want)
		} else if got := s.err.String(); got != tc.want {
			t.Errorf("scan(%q): %q, want %q", tc.line, got, tc.want)
		}
	}
}
