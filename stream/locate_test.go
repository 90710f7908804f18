package stream

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTruncatedWhileReadMessage: an input truncated under a running job
// (logrotate's copytruncate) failed its next commit with "input X: X ends
// before byte 4096", which says nothing of what happened or what to do.
func TestTruncatedWhileReadMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.log")
	if err := os.WriteFile(path, []byte("{\"id\":\"a1\"}\n{\"id\":\"a2\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fl, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	f := &Filter{job: Checkpoint{Offset: 5000}, inFiles: []*os.File{fl}}
	err = f.recordIdentity()
	if err == nil || !strings.Contains(err.Error(), "truncated while it was read") || !strings.Contains(err.Error(), "run again") {
		t.Fatalf("recordIdentity: %v", err)
	}
}
