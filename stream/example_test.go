package stream_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/stream"
)

// run filters in with an engine in memory, as dedup filter without
// --state does, and returns what it wrote to stdout and stderr.
func run(cfg stream.Config, in string) (out, errOut string, err error) {
	var stdout, stderr bytes.Buffer
	cfg.Stdin, cfg.Stdout, cfg.Stderr = strings.NewReader(in), &stdout, &stderr
	eng, err := dedup.Open(dedup.Options{Window: time.Hour, MaxInFlight: stream.MaxInFlight(&cfg)})
	if err != nil {
		return "", "", err
	}
	f, err := stream.New(eng, cfg)
	if err == nil {
		err = f.Run()
		err = errors.Join(err, f.Close())
		if err == nil {
			err = f.Verdict()
		}
	}
	err = errors.Join(err, eng.Close())
	return stdout.String(), stderr.String(), err
}

func config() stream.Config {
	return stream.Config{
		Inputs: []string{"-"}, Out: "-", CommitEvery: 1000, CommitInterval: time.Second, Chunk: 1 << 16,
		Keys: stream.KeyConfig{Format: "json", Key: "id", MaxKey: 4096, MaxLine: 1 << 20},
	}
}

// Example filters NDJSON on stdin to stdout by its "id" member, the way
// `dedup filter --key id` does.
func Example() {
	out, _, err := run(config(), `{"id":1,"v":"a"}
{"id":2,"v":"b"}
{"id":1,"v":"a again"}
`)
	fmt.Print(out, err)
	// Output:
	// {"id":1,"v":"a"}
	// {"id":2,"v":"b"}
	// <nil>
}

// TestDupsFile: duplicates go to Dups, the distinct events to Out, and
// Counts adds them up.
func TestDupsFile(t *testing.T) {
	dir := t.TempDir()
	cfg := config()
	cfg.Out, cfg.Dups = filepath.Join(dir, "out"), filepath.Join(dir, "dups")
	if _, _, err := run(cfg, "{\"id\":1}\n{\"id\":1}\n{\"id\":2}\n"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{cfg.Out: "{\"id\":1}\n{\"id\":2}\n", cfg.Dups: "{\"id\":1}\n"} {
		if b, err := os.ReadFile(name); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
}

// TestBadConfigIsUsage: a bad field is an error matching ErrUsage that
// names the flag of dedup filter, before anything is opened.
func TestBadConfigIsUsage(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*stream.Config)
		want string
	}{
		{func(c *stream.Config) { c.CommitEvery = 0 }, "--commit-every 0"},
		{func(c *stream.Config) { c.Chunk = 10 }, "--chunk 10"},
		{func(c *stream.Config) { c.Keys.Key = "" }, "--format json needs --key"},
		{func(c *stream.Config) { c.Inputs = []string{"-", "-"} }, "stdin (-) given more than once"},
	} {
		cfg := config()
		tc.mod(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, stream.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want ErrUsage naming %q", err, tc.want)
		}
	}
}

// TestStrictIsRejected: under Strict the first rejected line stops the
// run with an error matching ErrRejected, the lines before it written.
func TestStrictIsRejected(t *testing.T) {
	cfg := config()
	cfg.Strict = true
	out, _, err := run(cfg, "{\"id\":1}\nnot json\n{\"id\":2}\n")
	if !errors.Is(err, stream.ErrRejected) || !strings.Contains(err.Error(), "--strict: <stdin>:2") {
		t.Fatalf("err = %v, want ErrRejected at line 2", err)
	}
	if out != "{\"id\":1}\n" {
		t.Errorf("out = %q, want the line before the reject", out)
	}
}

// TestKeyerKey: Keyer.Key returns the key, or an error matching
// ErrRejected that says why.
func TestKeyerKey(t *testing.T) {
	x, err := stream.NewKeyer(stream.KeyConfig{Format: "json", Key: "user.id", MaxKey: 64, MaxLine: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if k, _, err := x.Clone().Key([]byte(`{"user":{"id":"u7"}}`), nil); err != nil || string(k) != `"u7"` {
		t.Errorf("Key = %q, %v", k, err)
	}
	if _, _, err := x.Key([]byte(`{"user":{}}`), nil); !errors.Is(err, stream.ErrRejected) || !strings.Contains(err.Error(), "user.id") {
		t.Errorf("Key of a line without the key = %v, want ErrRejected naming user.id", err)
	}
}
