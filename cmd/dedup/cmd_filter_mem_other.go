//go:build !linux

package main

// releaseStartupPages does nothing off Linux (see the Linux version).
func releaseStartupPages() {}
