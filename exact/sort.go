package exact

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
)

// sortEnt is a key of a memGen being sorted: 8 bytes of it from some depth
// (big-endian, zero padded) and its offset in the arena.
type sortEnt struct {
	prefix uint64
	off    uint64
}

// prefix8 returns bytes [depth, depth+8) of k, big-endian, zero padded.
func prefix8(k []byte, depth int) uint64 {
	var p [8]byte
	if len(k) > depth {
		copy(p[:], k[depth:])
	}
	return binary.BigEndian.Uint64(p[:])
}

// sortedKeys returns the keys of g in key order (duplicates adjacent), as
// offsets in its arena. ents and tmp are scratch space, returned for reuse.
func (g *memGen) sortedKeys(ents, tmp []sortEnt) ([]sortEnt, []sortEnt) {
	ents = slices.Grow(ents[:0], g.n)
	g.each(func(off int, k []byte) {
		ents = append(ents, sortEnt{prefix: prefix8(k, 0), off: uint64(off)})
	})
	tmp = radixSort(ents, tmp)
	tmp = g.refine(ents, 8, tmp)
	return ents, tmp
}

// refineCmp is the run length under which refine compares keys instead of
// radix-sorting them on their next bytes.
const refineCmp = 32

// refine orders the runs of ents that radixSort left equal in prefix,
// prefix holding key bytes [depth-8, depth): a long run is radix-sorted
// again on the next eight bytes, and so on (keys sharing a long prefix,
// such as UUID-like keys of consecutive events, would otherwise fall to a
// comparison sort of whole runs); a short one, or one whose keys end
// before depth, is sorted by comparing keys. It overwrites prefix.
func (g *memGen) refine(ents []sortEnt, depth int, tmp []sortEnt) []sortEnt {
	key := func(e *sortEnt) []byte { return g.keyAt(int(e.off)) }
	for i := 0; i < len(ents); {
		j := i + 1
		for j < len(ents) && ents[j].prefix == ents[i].prefix {
			j++
		}
		if j-i > 1 {
			run := ents[i:j]
			longest := 0
			for k := range run {
				longest = max(longest, len(key(&run[k])))
			}
			if len(run) < refineCmp || longest <= depth {
				slices.SortFunc(run, func(x, y sortEnt) int { return bytes.Compare(key(&x), key(&y)) })
			} else {
				for k := range run {
					run[k].prefix = prefix8(key(&run[k]), depth)
				}
				tmp = radixSort(run, tmp)
				tmp = g.refine(run, depth+8, tmp)
			}
		}
		i = j
	}
	return tmp
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
