//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package dedup

import (
	"io"
	"os"
	"syscall"
)

// lockHolder returns the id of the process that holds the POSIX lock
// Pebble takes on the file at path (its state's LOCK), 0 if none or if the
// system does not tell.
func lockHolder(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}
