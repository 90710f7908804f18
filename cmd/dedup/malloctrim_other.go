//go:build !linux || !cgo

package main

// trimMalloc does nothing without cgo on Linux: Pebble then allocates in
// the Go heap, which debug.FreeOSMemory returns.
func trimMalloc() {}
