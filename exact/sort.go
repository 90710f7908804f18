package exact

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
)

// sortEnt is a fingerprint of a memGen being sorted: its first 8 bytes
// (big-endian) and its offset in the arena.
type sortEnt struct {
	prefix uint64
	off    uint64
}

// sortedKeys returns the fingerprints of g in byte order (duplicates
// adjacent), as offsets in its arena. ents and tmp are scratch space,
// returned for reuse. Fingerprints are uniform: a radix sort of their
// first 8 bytes orders them, but for the runs of equal first halves (a key
// added twice, or 2^-64 odds), ordered by comparing whole fingerprints.
func (g *memGen) sortedKeys(ents, tmp []sortEnt) ([]sortEnt, []sortEnt) {
	ents = slices.Grow(ents[:0], g.n)
	g.each(func(off int, fp []byte) {
		ents = append(ents, sortEnt{prefix: binary.BigEndian.Uint64(fp), off: uint64(off)})
	})
	tmp = radixSort(ents, tmp)
	for i := 0; i < len(ents); {
		j := i + 1
		for j < len(ents) && ents[j].prefix == ents[i].prefix {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(ents[i:j], func(x, y sortEnt) int {
				return bytes.Compare(g.keyAt(int(x.off)), g.keyAt(int(y.off)))
			})
		}
		i = j
	}
	return ents, tmp
}

// radixSort sorts ents by prefix with an LSD radix sort on bytes, skipping
// the bytes that are equal in every entry. tmp is scratch space, returned
// for reuse.
func radixSort(ents, tmp []sortEnt) []sortEnt {
	if len(ents) < 256 {
		slices.SortFunc(ents, func(x, y sortEnt) int { return cmp.Compare(x.prefix, y.prefix) })
		return tmp
	}
	tmp = slices.Grow(tmp[:0], len(ents))[:len(ents)]
	var or, and uint64 = 0, ^uint64(0)
	for i := range ents {
		or |= ents[i].prefix
		and &= ents[i].prefix
	}
	src, dst := ents, tmp
	for shift := uint(0); shift < 64; shift += 8 {
		if byte((or^and)>>shift) == 0 {
			continue
		}
		var count [256]int
		for i := range src {
			count[byte(src[i].prefix>>shift)]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for i := range src {
			d := byte(src[i].prefix >> shift)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &ents[0] {
		copy(ents, src)
	}
	return tmp
}
