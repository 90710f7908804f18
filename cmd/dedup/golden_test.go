package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// runCmd runs dedup in-process with args and returns its exit status,
// stdout and stderr.
func runCmd(t testing.TB, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}
	code := run(e, args)
	return code, out.String(), errb.String()
}

// TestGolden runs `dedup filter` over the testdata inputs in every key
// mode and compares the outputs, the rejects and the exit status with
// testdata/golden/NAME.golden. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"json_single", []string{"--key", "event_id", "testdata/events.ndjson"}},
		{"json_nested", []string{"--key", "user.id", "testdata/events.ndjson"}},
		{"json_composite", []string{"--key", "user.id,seq", "testdata/events.ndjson"}},
		{"json_two_inputs", []string{"--key", "event_id", "testdata/events.ndjson", "--in", "testdata/events.ndjson"}},
		{"json_max_key", []string{"--key", "event_id", "--max-key", "4", "testdata/events.ndjson"}},
		{"json_strict", []string{"--key", "event_id", "--strict", "testdata/events.ndjson"}},
		{"json_rejects_stderr", []string{"--key", "event_id", "--no-rejects-file", "testdata/events.ndjson"}},
		{"lines_whole", []string{"--format", "lines", "testdata/access.txt"}},
		{"lines_field", []string{"--format", "lines", "--field", "4", "--delim", ",", "testdata/access.txt"}},
		{"lines_regex", []string{"--format", "lines", "--regex", `req=(\w+)`, "testdata/access.txt"}},
		{"lines_regex_match", []string{"--format", "lines", "--regex", `/[a-z]*`, "testdata/access.txt"}},
		{"lines_strict", []string{"--format", "lines", "--field", "4", "--delim", ",", "--strict", "testdata/access.txt"}},
		{"usage_no_key", []string{"testdata/events.ndjson"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"filter", "--out", filepath.Join(dir, "out"), "--dups", filepath.Join(dir, "dups")}
			rejectsFile := true
			for _, a := range tc.args {
				if a == "--no-rejects-file" {
					rejectsFile = false
					continue
				}
				args = append(args, a)
			}
			if rejectsFile {
				args = append(args, "--rejects", filepath.Join(dir, "rejects"))
			}
			code, stdout, stderr := runCmd(t, "", args...)
			var got strings.Builder
			fmt.Fprintf(&got, "== args\n%s\n== exit status\n%d\n", strings.Join(tc.args, " "), code)
			for _, f := range []string{"out", "dups", "rejects"} {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				if f == "rejects" && !rejectsFile {
					continue
				}
				fmt.Fprintf(&got, "== %s\n%s", f, b)
			}
			if stdout != "" {
				fmt.Fprintf(&got, "== stdout\n%s", stdout)
			}
			if stderr != "" {
				// Usage errors print the flag list: keep the first line.
				if code == exitBad && strings.Contains(stderr, "Usage") {
					stderr, _, _ = strings.Cut(stderr, "\n")
					stderr += "\n"
				}
				fmt.Fprintf(&got, "== stderr\n%s", stderr)
			}
			golden := filepath.Join("testdata", "golden", tc.name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got.String() != string(want) {
				t.Errorf("output differs from %s (run with -update to accept):\n--- got\n%s\n--- want\n%s", golden, got.String(), want)
			}
		})
	}
}
