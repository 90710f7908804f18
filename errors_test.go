package dedup_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/snapshot"
)

// TestCorruptionIsOneClass checks that corruption reported by every layer
// matches dedup.ErrCorrupt, and still its own layer's sentinel alone.
func TestCorruptionIsOneClass(t *testing.T) {
	layers := map[string]error{
		"filter":   filter.ErrCorrupt,
		"exact":    exact.ErrCorrupt,
		"snapshot": snapshot.ErrCorrupt,
	}
	for name, sentinel := range layers {
		if !errors.Is(sentinel, dedup.ErrCorrupt) {
			t.Errorf("%s.ErrCorrupt does not match dedup.ErrCorrupt", name)
		}
		for other, o := range layers {
			if other != name && errors.Is(sentinel, o) {
				t.Errorf("%s.ErrCorrupt matches %s.ErrCorrupt", name, other)
			}
		}
	}

	check := func(layer string, err error, own error) {
		t.Helper()
		if !errors.Is(err, dedup.ErrCorrupt) || (own != nil && !errors.Is(err, own)) {
			t.Errorf("%s: %v: want an error matching dedup.ErrCorrupt and its layer's sentinel", layer, err)
		}
	}

	_, err := filter.Unmarshal([]byte("not a filter"))
	check("filter", err, filter.ErrCorrupt)

	fs := vfs.NewMem()
	f, err := fs.Create("junk.snap", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("not a snapshot, not at all")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = snapshot.Read(fs, "junk.snap")
	check("snapshot", err, snapshot.ErrCorrupt)

	// An exact store whose format marker is malformed is corrupt; one
	// that names a newer format is not.
	for _, c := range []struct {
		marker []byte
		want   error
	}{{[]byte{1, 2}, exact.ErrCorrupt}, {[]byte{99}, exact.ErrNewerFormat}} {
		db, err := pebble.Open("store", &pebble.Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set([]byte("\x00dedup-exact"), c.marker, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = exact.Open("store", exact.Options{FS: fs})
		if c.want == exact.ErrCorrupt {
			check("exact", err, exact.ErrCorrupt)
		} else if !errors.Is(err, dedup.ErrNewerFormat) || errors.Is(err, dedup.ErrCorrupt) {
			t.Errorf("exact: marker %x: %v: want dedup.ErrNewerFormat, not corruption", c.marker, err)
		}
	}

	// The engine's own metadata: a malformed hash seed.
	e, err := dedup.Open(dedup.Options{Dir: "state", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := exact.Open("state", exact.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetMeta("seed", []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = dedup.Open(dedup.Options{Dir: "state", FS: fs})
	check("engine", err, nil)
}

// TestErrorPrefixOnce checks that an error wrapped inside the package
// carries the "dedup: " prefix once.
func TestErrorPrefixOnce(t *testing.T) {
	e, err := dedup.Open(dedup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	err = e.ObserveBatch([][]byte{[]byte("a"), nil}, make([]dedup.Verdict, 2))
	if !errors.Is(err, dedup.ErrEmptyKey) || strings.Count(err.Error(), "dedup: ") != 1 {
		t.Fatalf("ObserveBatch = %v; want ErrEmptyKey with one dedup: prefix", err)
	}
	if err := e.Backup("elsewhere"); err == nil || strings.Count(err.Error(), "dedup: ") != 1 {
		t.Fatalf("Backup of an in-memory engine = %v; want an error with one dedup: prefix", err)
	}
}

// TestZeroOptionsAreValid: a zero field selects its default, so
// Options{}.Validate() reports nothing, while an explicit bad value next
// to zero fields is still named.
func TestZeroOptionsAreValid(t *testing.T) {
	if err := (&dedup.Options{}).Validate(); err != nil {
		t.Fatalf("Options{}.Validate() = %v, want nil: zero fields select their defaults", err)
	}
	err := (&dedup.Options{Shards: -1}).Validate()
	if !errors.Is(err, dedup.ErrInvalidOptions) || !strings.Contains(err.Error(), "Shards") {
		t.Fatalf("Validate with Shards -1 = %v, want ErrInvalidOptions naming Shards", err)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 1 {
		t.Fatalf("Validate with one bad field reported %d errors: %v", n, err)
	}
}

// TestZeroEngineIsNotOpen: the methods of an Engine that Open did not make
// say so, instead of failing on an option they would have read.
func TestZeroEngineIsNotOpen(t *testing.T) {
	var e dedup.Engine
	for name, err := range map[string]error{
		"Observe":       func() error { _, err := e.Observe([]byte("k")); return err }(),
		"ObserveBatch":  e.ObserveBatch([][]byte{[]byte("k")}, make([]dedup.Verdict, 1)),
		"Peek":          func() error { _, err := e.Peek([]byte("k")); return err }(),
		"Forget":        e.Forget([]byte("k")),
		"Done":          e.Done([]byte("k")),
		"Commit":        e.Commit(nil),
		"CommitThrough": e.CommitThrough(0, nil),
		"Close":         e.Close(),
	} {
		if !errors.Is(err, dedup.ErrNotOpen) {
			t.Errorf("%s on a zero Engine = %v, want ErrNotOpen", name, err)
		}
	}
}

// inUseChildEnv makes TestStateInUseChild hold the state directory it
// names open until its standard input closes.
const inUseChildEnv = "DEDUP_IN_USE_DIR"

func TestStateInUseChild(t *testing.T) {
	dir := os.Getenv(inUseChildEnv)
	if dir == "" {
		return
	}
	e, err := dedup.Open(dedup.Options{Dir: dir})
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	fmt.Println("OPEN")
	io.Copy(io.Discard, os.Stdin)
	e.Close()
}

// TestStateInUse: a second Open of a state directory, in this process or
// in another one, fails with ErrStateInUse; from another process the
// message names the process that holds it.
func TestStateInUse(t *testing.T) {
	if os.Getenv(inUseChildEnv) != "" {
		return
	}
	dir := t.TempDir()
	e, err := dedup.Open(dedup.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dedup.Open(dedup.Options{Dir: dir})
	if !errors.Is(err, dedup.ErrStateInUse) || !strings.Contains(err.Error(), "in this process") {
		t.Fatalf("second Open in one process = %v, want ErrStateInUse saying so", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestStateInUseChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), inUseChildEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "OPEN\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	_, err = dedup.Open(dedup.Options{Dir: dir})
	want := fmt.Sprintf("in process %d", cmd.Process.Pid)
	if !errors.Is(err, dedup.ErrStateInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open of a state another process holds = %v, want ErrStateInUse saying %q", err, want)
	}
	t.Logf("%v", err)
}
