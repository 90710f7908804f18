package idempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// storedOf encodes a response the way run stores it.
func storedOf(m *middleware, status int, h http.Header, body string) []byte {
	return append(m.appendHead(nil, status, h), body...)
}

func TestReplayRestoresHeadersAndBody(t *testing.T) {
	m := &middleware{}
	h := http.Header{"Location": {"/orders/7"}, "X-Multi": {"a", "b", ""}, "Content-Type": {"application/json"}, "X-Empty": {}}
	res := storedOf(m, 201, h, `{"id":7}`)
	w := httptest.NewRecorder()
	w.Header().Set("X-Before", "kept")
	if err := m.replay(w, res); err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Location": {"/orders/7"}, "X-Multi": {"a", "b", ""}, "Content-Type": {"application/json"},
		"X-Before": {"kept"}, "Idempotent-Replayed": {"true"}, "Content-Length": {"8"}}
	if w.Code != 201 || w.Body.String() != `{"id":7}` || !reflect.DeepEqual(w.Header(), want) {
		t.Fatalf("replayed %d %q %v, want 201 %q %v", w.Code, w.Body.String(), w.Header(), `{"id":7}`, want)
	}
	// The replayed values share memory: appending to one must not reach
	// another.
	for k := range w.Header() {
		w.Header()[k] = append(w.Header()[k], "appended")
		want[k] = append(want[k], "appended")
		if !reflect.DeepEqual(w.Header(), want) {
			t.Fatalf("after an append to %s: %v, want %v", k, w.Header(), want)
		}
	}
}

func TestReplayRefusesDamagedRecords(t *testing.T) {
	m := &middleware{}
	good := storedOf(m, 200, http.Header{"X-A": {"1", "2"}}, "body")
	for i := 0; i < len(good)-len("body"); i++ {
		w := httptest.NewRecorder()
		if err := m.replay(w, good[:i]); err == nil {
			t.Fatalf("a stored response cut to %d bytes replayed as %d %v", i, w.Code, w.Header())
		}
		if len(w.Header()) != 0 {
			t.Fatalf("a refused replay left headers %v", w.Header())
		}
	}
	bad := append([]byte(nil), good...)
	bad[2] = 0 // status 0
	if err := m.replay(httptest.NewRecorder(), bad); err == nil {
		t.Fatal("status 0 replayed")
	}
}

// FuzzReplay: whatever bytes a stored response holds, replay does not
// panic, and it reproduces every response encode wrote.
func FuzzReplay(f *testing.F) {
	m := &middleware{}
	f.Add(storedOf(m, 201, http.Header{"A": {"1", "2"}, "B": {""}}, "xyz"), "k", "v", "body")
	f.Add([]byte("H1\x80"), "", "", "")
	f.Add(m.appendTrailers(storedOf(m, 200, http.Header{"A": {"1"}}, "xyz"), http.Header{"Trailer": {"T"}, "T": {"v"}}), "", "", "")
	f.Add([]byte("H2\xc8\x01\x00\x00\x00\x00\x00"), "", "", "")
	f.Fuzz(func(t *testing.T, raw []byte, k, v, body string) {
		w := httptest.NewRecorder()
		if err := m.replay(w, raw); err == nil && (w.Code < 100 || w.Code > 999) {
			t.Fatalf("status %d replayed", w.Code)
		}
		name := http.CanonicalHeaderKey(k)
		if name == "" || strings.ContainsAny(name, "\r\n:") || m.replayable(http.Header{}, name) == false {
			return
		}
		h := http.Header{name: {v, v + "2"}}
		w = httptest.NewRecorder()
		if err := m.replay(w, storedOf(m, 299, h, body)); err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(w.Body)
		if w.Code != 299 || !bytes.Equal(got, []byte(body)) || !reflect.DeepEqual(w.Header()[name], h[name]) {
			t.Fatalf("replayed %d %q %q, want 299 %q %q", w.Code, got, w.Header()[name], body, h[name])
		}
	})
}

// TestReadBodyBeyondContentLength: a request whose Body holds more than
// its ContentLength says (one not from net/http's server) is read whole,
// up to MaxRequestBody, so that the fingerprint covers every byte.
func TestReadBodyBeyondContentLength(t *testing.T) {
	read := func(limit, declared int64, body string) ([]byte, error) {
		m := &middleware{o: Options{MaxRequestBody: limit}}
		m.mem.max = 1 << 20
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.ContentLength = declared
		b, held, err := m.readBody(r)
		m.mem.give(held)
		if used := m.mem.used.Load(); used != 0 {
			t.Errorf("%d bytes still taken after the read", used)
		}
		return b, err
	}
	for _, c := range []struct {
		limit, declared int64
		body            string
		ok              bool
	}{
		{100, 5, strings.Repeat("b", 20), true},
		{100, 20, strings.Repeat("b", 20), true},
		{10, 5, strings.Repeat("b", 11), false},
		{10, 10, strings.Repeat("b", 11), false},
		{10, 9, strings.Repeat("b", 10), true},
		{10, 10, strings.Repeat("b", 10), true},
	} {
		got, err := read(c.limit, c.declared, c.body)
		var tooLarge *http.MaxBytesError
		switch {
		case c.ok && (err != nil || string(got) != c.body):
			t.Errorf("limit %d, ContentLength %d, %d bytes: got %q, %v", c.limit, c.declared, len(c.body), got, err)
		case !c.ok && !errors.As(err, &tooLarge):
			t.Errorf("limit %d, ContentLength %d, %d bytes: got %q, %v, want a MaxBytesError", c.limit, c.declared, len(c.body), got, err)
		}
	}
	if _, err := read(100, 30, strings.Repeat("b", 20)); err == nil {
		t.Error("a body shorter than its ContentLength read without error")
	}
}

// readSpy records whether its Read was called.
type readSpy struct{ read bool }

func (r *readSpy) Read([]byte) (int, error) { r.read = true; return 0, io.EOF }

// TestReadBodyRefusesAnnouncedLengthUnread: a Content-Length over
// MaxRequestBody, or over the memory left, is refused before the body is
// read (net/http then sends no 100 Continue).
func TestReadBodyRefusesAnnouncedLengthUnread(t *testing.T) {
	m := &middleware{o: Options{MaxRequestBody: 100}}
	m.mem.max = 150
	m.mem.used.Store(100)
	for _, c := range []struct {
		length int64
		want   error
	}{{101, &http.MaxBytesError{}}, {60, errOverloaded}} {
		spy := &readSpy{}
		r := httptest.NewRequest("POST", "/", spy)
		r.ContentLength = c.length
		_, held, err := m.readBody(r)
		var tooLarge *http.MaxBytesError
		ok := errors.Is(err, errOverloaded) == (c.want == errOverloaded) && errors.As(err, &tooLarge) == (c.want != errOverloaded)
		if !ok || spy.read || held != 0 {
			t.Errorf("Content-Length %d: %v, read %v, held %d; want %T unread", c.length, err, spy.read, held, c.want)
		}
	}
}
