//go:build unix

package diskuse

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// allocated returns the bytes allocated to the file fi describes: its
// blocks of 512 bytes where the system reports them, its length otherwise.
func allocated(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Blocks) * 512
	}
	return uint64(max(fi.Size(), 0))
}

func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
