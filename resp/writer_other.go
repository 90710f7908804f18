//go:build !unix

package resp

import "net"

// writeNow leaves every write to the queue's goroutine where the socket
// cannot be written without blocking.
func writeNow(conn net.Conn, p []byte) (n int, ok bool, err error) {
	return 0, false, nil
}
