package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFilterTimeField replays a log of 2020, three hours long, with
// --time-field and --window 5m: duplicates seconds to four minutes apart
// are dropped, those one to two hours apart are written again, as a map
// of key to first-seen event time says; times come in s, ms, us, ns and
// RFC 3339, some lines a little late.
func TestFilterTimeField(t *testing.T) {
	const window = 5 * time.Minute
	base := time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 3))
	type ev struct {
		at  time.Time
		key string
	}
	var evs []ev
	for i := range 4000 {
		at := base.Add(time.Duration(i) * 2500 * time.Millisecond)
		k := fmt.Sprintf("k%d", i)
		evs = append(evs, ev{at, k})
		switch i % 3 {
		case 0:
			evs = append(evs, ev{at.Add(5*time.Second + time.Duration(rng.Int64N(int64(235*time.Second)))), k})
		case 1:
			evs = append(evs, ev{at.Add(time.Hour + time.Duration(rng.Int64N(int64(time.Hour)))), k})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
	var in strings.Builder
	first := map[string]time.Time{}
	var want []string
	var clock time.Time
	for i, x := range evs {
		at := x.at
		if i%11 == 0 {
			at = at.Add(-20 * time.Second) // late
		}
		var ts string
		switch i % 5 {
		case 0:
			ts = fmt.Sprint(at.Unix())
		case 1:
			ts = fmt.Sprint(at.UnixMilli())
		case 2:
			ts = fmt.Sprint(at.UnixMicro())
		case 3:
			ts = fmt.Sprint(at.UnixNano())
		default:
			ts = `"` + at.Format(time.RFC3339Nano) + `"`
		}
		if i%5 == 0 {
			at = at.Truncate(time.Second) // the time as written, in seconds
		}
		line := fmt.Sprintf(`{"id":%q,"ts":%s}`, x.key, ts)
		in.WriteString(line + "\n")
		if at.After(clock) {
			clock = at
		}
		f, seen := first[x.key]
		switch {
		case !seen:
			want = append(want, line)
			first[x.key] = clock
		case clock.Sub(f) < window:
		case clock.Sub(f) >= window+window/4:
			want = append(want, line)
			first[x.key] = clock
		default:
			t.Fatalf("the stream has a duplicate in the grace span: %s after %v", x.key, clock.Sub(f))
		}
	}
	code, out, stderr := runCmd(t, in.String(), "filter", "--key", "id", "--time-field", "ts", "--window", "5m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d lines written, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("line %d: %s, want %s", i, got[i], want[i])
		}
	}
}

// TestFilterTimeFieldRejects: a line without a usable time is a reject
// naming why; --format lines takes the time from a field; bad flags are
// usage errors.
func TestFilterTimeFieldRejects(t *testing.T) {
	in := `{"id":"a","ts":1583020800}
{"id":"b"}
{"id":"c","ts":"yesterday"}
{"id":"d","ts":-5}
{"id":"e","ts":null}
{"id":"a","ts":"2020-03-01T00:01:00Z"}
{"id":"a","ts":"2020-03-01T02:00:00Z"}
`
	code, out, stderr := runCmd(t, in, "filter", "--key", "id", "--time-field", "ts", "--window", "5m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "{\"id\":\"a\",\"ts\":1583020800}\n{\"id\":\"a\",\"ts\":\"2020-03-01T02:00:00Z\"}\n"; out != want {
		t.Errorf("out %q, want %q", out, want)
	}
	for _, s := range []string{`<stdin>:2: missing time "ts"`, `<stdin>:3: bad time "yesterday" in "ts"`, `<stdin>:4: bad time "-5"`, `<stdin>:5: missing time "ts"`} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
	code, out, stderr = runCmd(t, "a\t1583020800000\nb\t1583020801000\na\t1583020900000\na\t1583030900000\nc\n",
		"filter", "--format", "lines", "--field", "1", "--time-field", "2", "--time-unit", "ms", "--window", "5m")
	if code != 0 || out != "a\t1583020800000\nb\t1583020801000\na\t1583030900000\n" || !strings.Contains(stderr, "<stdin>:5: missing time field 2") {
		t.Errorf("lines: exit %d, out %q, stderr %s", code, out, stderr)
	}
	for _, args := range [][]string{
		{"--key", "id", "--time-unit", "ms"},
		{"--key", "id", "--time-field", "ts", "--time-unit", "hours"},
		{"--format", "lines", "--time-field", "ts"},
		{"--key", "id", "--time-field", "a,b"},
	} {
		if code, _, stderr := runCmd(t, "", append([]string{"filter"}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage): %s", args, code, stderr)
		}
	}
}
