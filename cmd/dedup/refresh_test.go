package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/streamdedup/dedup/resp"
	"github.com/twmb/franz-go/pkg/kgo"
)

// refreshInput is a key seen every 4 minutes for 12 minutes, then 6m16s
// after its last sighting, with a 5-minute window: the fixed window writes
// it at 0, 8m and 18m16s; the sliding one (--refresh) at 0 and 18m16s.
func refreshInput() (lines []string, fixed, sliding string) {
	base := time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC)
	at := []time.Duration{0, 4 * time.Minute, 8 * time.Minute, 12 * time.Minute, 18*time.Minute + 16*time.Second}
	for _, d := range at {
		lines = append(lines, fmt.Sprintf(`{"id":"k","ts":%d}`, base.Add(d).Unix()))
	}
	fixed = lines[0] + "\n" + lines[2] + "\n" + lines[4] + "\n"
	sliding = lines[0] + "\n" + lines[4] + "\n"
	return lines, fixed, sliding
}

// TestFilterRefresh: with --refresh a key that keeps coming back within the
// window is dropped for as long as it does, and written again once it has
// been away longer than the window (and its last span), in memory and with
// a state directory.
func TestFilterRefresh(t *testing.T) {
	lines, fixed, sliding := refreshInput()
	in := strings.Join(lines, "\n") + "\n"
	for _, state := range []bool{false, true} {
		for _, refresh := range []bool{false, true} {
			args := []string{"filter", "--key", "id", "--time-field", "ts", "--window", "5m"}
			if state {
				args = append(args, "--state", t.TempDir())
			}
			want := fixed
			if refresh {
				args = append(args, "--refresh")
				want = sliding
			}
			code, out, stderr := runCmd(t, in, args...)
			if code != 0 || out != want {
				t.Errorf("state %v, --refresh %v: exit %d, out\n%s\nwant\n%s%s", state, refresh, code, out, want, stderr)
			}
		}
	}
}

// TestServeRefreshKeepsTableSetting: the default table keeps the window
// kind it was created with (table.json): a later run without --refresh
// adopts it, one with a contradicting --refresh is refused naming it.
func TestServeRefreshKeepsTableSetting(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, resp.DefaultTable), 0o700); err != nil {
		t.Fatal(err)
	}
	b := []byte(`{"window":3600000000000,"expected_rate":10000,"false_positive_rate":0.01,"probabilistic":false,"capacity":36000000,"refresh":true}`)
	if err := os.WriteFile(filepath.Join(dir, resp.DefaultTable, "table.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, "", "serve", "--state", dir, "--listen", "127.0.0.1:0", "--refresh=false")
	if code != 2 || !strings.Contains(stderr, "--refresh=false") || !strings.Contains(stderr, "created with refresh true") {
		t.Errorf("--refresh=false against a refresh table: exit %d, %s; want 2 naming both", code, stderr)
	}
}

// TestKafkaRefresh: `dedup kafka` runs the window on record timestamps
// whatever the batching (a whole poll is in flight until its transaction
// commits): a key every 4 minutes of record time for 12 minutes, then
// 6m16s later, with a 5-minute window, is written at 0, 8m and 18m16s; with
// --refresh, which renews it at each sighting, at 0 and 18m16s.
func TestKafkaRefresh(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	for _, refresh := range []bool{false, true} {
		addrs := kafkaBroker(t, 1)
		base := time.Now().Add(-time.Hour)
		var recs []*kgo.Record
		for i, d := range []time.Duration{0, 4 * time.Minute, 8 * time.Minute, 12 * time.Minute, 18*time.Minute + 16*time.Second} {
			recs = append(recs, &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte(fmt.Sprintf(`{"event_id":"k","n":%d}`, i)), Timestamp: base.Add(d)})
		}
		kafkatest.Produce(t, addrs, recs...)
		args := []string{"--window", "5m"}
		want := []string{`{"event_id":"k","n":0}`, `{"event_id":"k","n":2}`, `{"event_id":"k","n":4}`}
		if refresh {
			args = append(args, "--refresh")
			want = []string{`{"event_id":"k","n":0}`, `{"event_id":"k","n":4}`}
		}
		c := startKafka(t, bin, addrs, dir, fmt.Sprintf("r%v", refresh), args...)
		kafkatest.WaitCommitted(t, addrs, "g", c.output)
		c.term(t)
		_, out := kafkatest.ReadAll(t, addrs, "out", 500*time.Millisecond)
		var got []string
		for _, r := range out {
			got = append(got, string(r.Value))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("--refresh %v: out topic %q, want %q\n%s", refresh, got, want, c.output())
		}
	}
}
