//go:build !unix

package stream

import "os"

// fileID returns the device and inode of the file fi describes; ok is
// false where the system does not tell them, as here.
func fileID(fi os.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }
