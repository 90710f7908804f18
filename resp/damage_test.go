package resp_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// TestCorruptTableAnswersAnError pins that a table whose store has a
// damaged block answers its commands with an error naming the file, while
// the server stays up: PING answers and another table keeps serving (a
// damaged block used to panic the process from inside the lookup).
func TestCorruptTableAnswersAnError(t *testing.T) {
	root := t.TempDir()
	cfg := resp.Options{Dir: root, Engine: dedup.Options{Window: time.Hour}}
	const n = 20000
	func() {
		srv, ln := listen(t, cfg)
		go srv.Serve(ln)
		c := client(t, ln.Addr().String())
		for i := 0; i < n; i += 1000 {
			args := []any{"BF.MADD", "bf:a"}
			for j := i; j < i+1000; j++ {
				args = append(args, fmt.Sprintf("item-%08d", j))
			}
			if err := c.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Do(ctx, "BF.ADD", "bf:b", "kept").Err(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}()
	// A backup flushes the table's keys into store tables; restored in
	// place, its largest table then gets a flipped byte.
	dir := resp.EngineDir(root, "bf:a")
	e, err := dedup.Open(dedup.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	bk := filepath.Join(t.TempDir(), "bk")
	if err := e.Backup(bk); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := dedup.RestoreBackup(bk, dir); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	var big string
	var size int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			big, size = f, fi.Size()
		}
	}
	if big == "" {
		t.Fatal("no store table to damage")
	}
	b, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(big, b, 0o600); err != nil {
		t.Fatal(err)
	}

	_, addr := start(t, cfg)
	c := client(t, addr)
	do := doer(t, c)
	var damaged string
	for i := 0; i < n && damaged == ""; i += 7 {
		if r := do("BF.EXISTS", "bf:a", fmt.Sprintf("item-%08d", i)); strings.HasPrefix(r, "error: ") {
			damaged = r
		}
	}
	if !strings.Contains(damaged, filepath.Base(big)) || !strings.Contains(damaged, "corrupt") {
		t.Fatalf("lookups in the damaged table: first error %q, want one naming %s as corrupt", damaged, filepath.Base(big))
	}
	if r := do("PING"); r != "PONG" {
		t.Fatalf("PING after the damaged read: %s", r)
	}
	if r := do("BF.EXISTS", "bf:b", "kept"); r != "1" {
		t.Fatalf("BF.EXISTS bf:b kept = %s, want 1: the other table serves", r)
	}
	if r := do("BF.ADD", "bf:b", "new"); r != "1" {
		t.Fatalf("BF.ADD bf:b new = %s, want 1", r)
	}
}
