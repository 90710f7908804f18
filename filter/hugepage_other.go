//go:build !linux

package filter

func adviseHuge(w []uint64) {}
