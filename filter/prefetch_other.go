//go:build !amd64

package filter

import "unsafe"

// prefetch does nothing on this architecture.
func prefetch(unsafe.Pointer) {}
