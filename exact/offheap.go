package exact

import (
	"math/bits"
	"unsafe"
)

// u64s views the first n*8 bytes of b, which must be 8-byte aligned, as n
// uint64s.
func u64s(b []byte, n int) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// offHeapU64s is a growing array of uint64s outside the Go heap (see
// offHeap): a memtable's log hashes. It doubles by copying into a new
// mapping.
type offHeapU64s struct {
	buf offHeapBuf
	s   []uint64
}

// append adds vs.
func (a *offHeapU64s) append(vs []uint64) {
	if len(a.s)+len(vs) > cap(a.s) {
		n := max(1024, 2*cap(a.s), len(a.s)+len(vs))
		buf := newOffHeapBuf(8 * n)
		s := u64s(buf.b[:8*n], n)[:len(a.s)]
		copy(s, a.s)
		a.buf.free()
		a.buf, a.s = buf, s
	}
	a.s = append(a.s, vs...)
}

// free gives the memory back; a is empty afterwards.
func (a *offHeapU64s) free() {
	a.buf.free()
	*a = offHeapU64s{}
}

// bytes is the memory a uses: the pages past its length are mapped but
// never touched, so they take no memory.
func (a *offHeapU64s) bytes() int { return 8 * len(a.s) }

// partArena hands out the index partitions of a memGen outside the Go
// heap: arrays of 8<<c entries, carved from chunks of 64 KiB doubling to
// 1 MiB (or mapped alone when larger), each named by a reference,
// chunk<<32 | byte offset, that view turns into a slice. A partition that
// grows gives its old array back to the free list of its size, where the
// next partition to grow to that size takes it.
type partArena struct {
	chunks []offHeapBuf
	free   [40][]uint64 // references of free arrays, by size class
	// size is the memory handed out, free lists included (the rest of the
	// last chunk is mapped but never touched, so it takes no memory).
	size int
}

// partCap returns the capacity of a partition array holding n entries: 0
// for none, else the power of two >= n, at least 8. A partition of n
// entries is full when n == partCap(n).
func partCap(n int) int {
	if n == 0 {
		return 0
	}
	return max(8, 1<<bits.Len(uint(n-1)))
}

// alloc returns the reference of an array of n entries, n a power of two
// >= 8.
func (a *partArena) alloc(n int) uint64 {
	c := bits.TrailingZeros(uint(n)) - 3
	if fl := a.free[c]; len(fl) > 0 {
		ref := fl[len(fl)-1]
		a.free[c] = fl[:len(fl)-1]
		return ref
	}
	need := 8 * n
	if need > chunkSize {
		buf := newOffHeapBuf(need)
		buf.b = buf.b[:need]
		a.chunks = append(a.chunks, buf)
		a.size += need
		return uint64(len(a.chunks)-1) << 32
	}
	last := len(a.chunks) - 1
	if last < 0 || len(a.chunks[last].b)+need > cap(a.chunks[last].b) {
		// Small first, as the key arena, so that small tables stay small.
		size := firstChunk
		if last >= 0 {
			size = min(chunkSize, 2*cap(a.chunks[last].b))
		}
		size = max(size, need)
		a.chunks = append(a.chunks, newOffHeapBuf(size))
		last++
	}
	a.size += need
	c0 := &a.chunks[last]
	off := len(c0.b)
	c0.b = c0.b[:off+need]
	return uint64(last)<<32 | uint64(off)
}

// view returns the first n entries of the array ref.
func (a *partArena) view(ref uint64, n int) []uint64 {
	c := a.chunks[ref>>32].b
	off := int(ref & (1<<32 - 1))
	return u64s(c[off:off+8*n], n)
}

// release gives back the array ref, holding n entries (partCap(n) is its
// size).
func (a *partArena) release(ref uint64, n int) {
	c := bits.TrailingZeros(uint(partCap(n))) - 3
	a.free[c] = append(a.free[c], ref)
}

// freeAll gives all the memory back.
func (a *partArena) freeAll() {
	for _, c := range a.chunks {
		c.free()
	}
	*a = partArena{}
}
