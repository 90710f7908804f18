//go:build !amd64

// Package prefetch starts loading cache lines ahead of their use. On this
// architecture it does nothing.
package prefetch

import "unsafe"

// Addr does nothing on this architecture.
func Addr(unsafe.Pointer) {}

// Lines does nothing on this architecture.
func Lines(unsafe.Pointer, int) {}
