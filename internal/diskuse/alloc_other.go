//go:build !unix

package diskuse

import (
	"errors"
	"io/fs"
	"os"
)

// allocated returns the length of the file fi describes: this system's
// allocated blocks are not read.
func allocated(fi os.FileInfo) uint64 { return uint64(max(fi.Size(), 0)) }

func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
