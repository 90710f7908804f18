// Package diskuse measures the space a directory takes on its file system:
// the blocks allocated to its files, as du counts them, not their lengths.
// Space preallocated past a file's end (Pebble preallocates write-ahead
// logs) is counted, which is what makes it differ from the sum of sizes.
package diskuse

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Bytes returns the bytes allocated to the files under dir on fs, counted
// recursively. On a file system that does not report allocated blocks (an
// in-memory one, or an operating system without them) a file counts its
// length.
func Bytes(fs vfs.FS, dir string) (uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, fmt.Errorf("diskuse: list %q: %w", dir, err)
	}
	var total uint64
	for _, name := range names {
		path := fs.PathJoin(dir, name)
		fi, err := fs.Stat(path)
		if err != nil {
			// A file removed since List (a compaction's input, an old
			// WAL) takes no space any more.
			if notExist(err) {
				continue
			}
			return total, fmt.Errorf("diskuse: stat %q: %w", path, err)
		}
		if fi.IsDir() {
			n, err := Bytes(fs, path)
			total += n
			if err != nil {
				return total, err
			}
			continue
		}
		total += allocated(fi)
	}
	return total, nil
}
