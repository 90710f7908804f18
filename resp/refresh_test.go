package resp_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// TestReserveRefresh: DEDUP.RESERVE ... REFRESH makes a table whose window
// slides: a key seen every 500 ms stays a duplicate for 3 s with a 2 s
// window, and is new again once away past the window and its last span.
// The setting is in table.json, and a server whose default differs keeps
// it when it reopens the table.
func TestReserveRefresh(t *testing.T) {
	state := t.TempDir()
	srv, addr := startNoCleanup(t, resp.Options{Dir: state, Fsync: resp.FsyncAlways})
	do := doer(t, client(t, addr))
	if got := do("DEDUP.RESERVE", "s", "WINDOW", "2000", "REFRESH"); got != "OK" {
		t.Fatalf("DEDUP.RESERVE = %s", got)
	}
	if got := do("DEDUP.OBSERVE", "s", "k"); got != "[new]" {
		t.Fatalf("DEDUP.OBSERVE = %s", got)
	}
	if got := do("DEDUP.COMMIT", "s"); got != "OK" {
		t.Fatalf("DEDUP.COMMIT = %s", got)
	}
	for i := range 6 {
		time.Sleep(500 * time.Millisecond)
		if got := do("DEDUP.OBSERVE", "s", "k"); got != "[duplicate]" {
			t.Fatalf("sighting %d: DEDUP.OBSERVE = %s, want duplicate", i, got)
		}
	}
	b, err := os.ReadFile(filepath.Join(state, "s", "table.json"))
	if err != nil || !strings.Contains(string(b), `"refresh": true`) {
		t.Fatalf("table.json: %s %v", b, err)
	}
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	_, addr = start(t, resp.Options{Dir: state, Fsync: resp.FsyncAlways})
	do = doer(t, client(t, addr))
	if got := do("DEDUP.OBSERVE", "s", "k"); got != "[duplicate]" {
		t.Fatalf("after the restart: DEDUP.OBSERVE = %s, want duplicate", got)
	}
	time.Sleep(2600 * time.Millisecond)
	if got := do("DEDUP.OBSERVE", "s", "k"); got != "[new]" {
		t.Fatalf("2.6 s after its last sighting: DEDUP.OBSERVE = %s, want new", got)
	}
}

// TestDefaultTableKeepsRefresh: a server whose Engine.Refresh differs from
// the default table's on disk is refused with ErrTableOptions.
func TestDefaultTableKeepsRefresh(t *testing.T) {
	state := t.TempDir()
	srv, err := resp.New(resp.Options{Dir: state, Engine: dedup.Options{Refresh: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := resp.New(resp.Options{Dir: state}); !errors.Is(err, resp.ErrTableOptions) {
		t.Fatalf("New without Refresh on a refresh default table: %v, want ErrTableOptions", err)
	}
}
