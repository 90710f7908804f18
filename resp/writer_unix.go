//go:build unix

package resp

import (
	"errors"
	"net"
	"syscall"
)

// writeNow writes as much of p as the socket's buffer takes without
// waiting. ok is false when conn has no file descriptor to write to.
func writeNow(conn net.Conn, p []byte) (n int, ok bool, err error) {
	sc, isSys := conn.(syscall.Conn)
	if !isSys {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	werr := rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			k, e := syscall.Write(int(fd), p[n:])
			if k > 0 {
				n += k
			}
			switch {
			case e == nil && k <= 0:
				return true // no progress: the rest is queued
			case e == nil:
			case errors.Is(e, syscall.EINTR):
			case errors.Is(e, syscall.EAGAIN):
				return true // full: the rest is queued
			default:
				err = e
				return true
			}
		}
		return true
	})
	if err == nil && werr != nil {
		err = werr
	}
	return n, true, err
}
