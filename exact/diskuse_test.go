package exact

import (
	"os/exec"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/diskuse"
)

// TestSmallStateSmallOnDisk opens a store on the real file system, with the
// default options, eight times, committing 2000 small keys each time: the
// directory must stay a small multiple of what it holds. Pebble preallocates
// each write-ahead log to 110% of the memtable and keeps up to five old logs
// for reuse, which had made such a state take 423 MB of disk.
func TestSmallStateSmallOnDisk(t *testing.T) {
	dir := t.TempDir()
	for round := 0; round < 8; round++ {
		s := mustOpen(t, dir, Options{})
		for c := 0; c < 2; c++ {
			from := (2*round + c) * 1000
			commitRange(t, s, uint64(round), from, from+1000, []byte("cp"))
		}
		mustClose(t, s)
	}
	n, err := diskuse.Bytes(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	// 16000 keys of 12 bytes, their log entries and Pebble's own files
	// (manifest, options) are well under 2 MiB.
	if n > 4<<20 {
		t.Fatalf("a store of 16000 keys takes %d bytes on disk", n)
	}
	t.Logf("a store of 16000 keys takes %d bytes on disk", n)
	if testing.Verbose() {
		out, _ := exec.Command("du", "-a", dir).CombinedOutput()
		t.Logf("%s", out)
	}
}
