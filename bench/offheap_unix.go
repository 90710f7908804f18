//go:build unix

package bench

import (
	"fmt"
	"syscall"
)

// offHeap maps size bytes of anonymous memory, outside the Go heap.
func offHeap(size int) ([]byte, error) {
	m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("bench: map %d bytes for the recorded stream: %w", size, err)
	}
	return m, nil
}

func freeOffHeap(m []byte) { _ = syscall.Munmap(m) }
