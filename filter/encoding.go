package filter

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
	cuckoo "github.com/seiflotfy/cuckoofilter"
)

// Encoding (version 1), all integers little-endian:
//
//	header, 40 bytes:
//	  [0:4]   magic "DDFL"
//	  [4]     format version (1)
//	  [5]     kind (1 bloom, 2 cuckoo, 3 blocked)
//	  [6]     growth factor (2)
//	  [7]     0
//	  [8:16]  growth base: link i >= 1 holds base*2^i keys
//	  [16:24] growth fp: link i >= 1 has target fp*(1-r)*r^i, float64 bits
//	  [24:32] target tightening ratio r in (0, 1), float64 bits
//	          (see growth in chain.go for what New writes; earlier
//	          versions wrote base = link 0's capacity, fp = the compound
//	          target and r = 1/4 for every kind, and such filters still
//	          grow that way)
//	  [32:36] number of links, 1..64
//	  [36:40] 0
//	then per link, oldest first:
//	  u64 length of the rest of the link
//	  u64 count, u64 capacity
//	  bloom:   u64 m (bits), u32 k, u32 0, ceil(m/64) words
//	  cuckoo:  u64 slots (power of two), u8 all-lossy, 7 x 0,
//	           32-byte bitmap of lost fingerprint values, slots bytes
//	           (the library's Encode: one fingerprint byte per slot)
//	  blocked: u64 blocks, u32 k, u32 0, blocks*64 bytes (8 words each)
//	trailer: xxhash64 of every byte before it.
//
// Unmarshal checks the checksum first (so any altered byte is rejected),
// then every field, and every length against the bytes actually present
// before it allocates anything.

const (
	magic         = "DDFL"
	formatVersion = 1
	headerLen     = 40
	trailerLen    = 8
	maxLinks      = 64
	linkHeadLen   = 8 + 16 // length, count, capacity
)

// MarshalBinary encodes the filter in the format above.
func (c *chain) MarshalBinary() ([]byte, error) {
	size := headerLen + trailerLen
	for _, l := range c.links {
		size += linkHeadLen + linkBodyLen(l)
	}
	b := make([]byte, 0, size)
	b = append(b, magic...)
	b = append(b, formatVersion, byte(c.kind), growth, 0)
	b = binary.LittleEndian.AppendUint64(b, c.base)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.fp))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.r))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.links)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, l := range c.links {
		body := linkBodyLen(l)
		b = binary.LittleEndian.AppendUint64(b, uint64(16+body))
		b = binary.LittleEndian.AppendUint64(b, l.count())
		b = binary.LittleEndian.AppendUint64(b, l.capacity())
		switch l := l.(type) {
		case *bloomFilter:
			b = binary.LittleEndian.AppendUint64(b, l.m)
			b = binary.LittleEndian.AppendUint32(b, uint32(l.k))
			b = binary.LittleEndian.AppendUint32(b, 0)
			b = appendWords(b, l.words)
		case *cuckooFilter:
			b = binary.LittleEndian.AppendUint64(b, l.slots)
			all := byte(0)
			if l.all {
				all = 1
			}
			b = append(b, all, 0, 0, 0, 0, 0, 0, 0)
			for _, w := range l.lossy {
				b = binary.LittleEndian.AppendUint64(b, w)
			}
			b = append(b, l.cf.Encode()...)
		case *blocked:
			b = binary.LittleEndian.AppendUint64(b, l.nblocks)
			b = binary.LittleEndian.AppendUint32(b, uint32(l.k))
			b = binary.LittleEndian.AppendUint32(b, 0)
			b = appendWords(b, l.words)
		}
	}
	b = binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b))
	if len(b) != size {
		return nil, fmt.Errorf("filter: internal error: encoded %d bytes, expected %d", len(b), size)
	}
	return b, nil
}

// linkBodyLen is the kind-specific part of a link's encoding.
func linkBodyLen(l link) int {
	switch l := l.(type) {
	case *bloomFilter:
		return 16 + 8*len(l.words)
	case *cuckooFilter:
		return 8 + 8 + 32 + int(l.slots)
	case *blocked:
		return 16 + 8*len(l.words)
	}
	panic("filter: unknown link type")
}

// littleEndian reports whether this machine stores words as the encoding
// does, so that they copy as bytes.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// wordBytes is the memory of w as bytes.
func wordBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), 8*len(w))
}

// appendWords appends w, little-endian. On a little-endian machine that is
// one copy of w's memory rather than a loop over its words: encoding the
// filters is most of the CPU of a snapshot.
func appendWords(b []byte, w []uint64) []byte {
	if littleEndian {
		return append(b, wordBytes(w)...)
	}
	for _, x := range w {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// readWords fills dst from src, little-endian; src holds at least
// 8*len(dst) bytes.
func readWords(dst []uint64, src []byte) {
	if littleEndian {
		copy(wordBytes(dst), src[:8*len(dst)])
		return
	}
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(src[8*i:])
	}
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Unmarshal decodes a filter encoded by MarshalBinary. Truncated, altered or
// foreign bytes return an error wrapping ErrCorrupt, never a panic; it
// allocates at most about len(data) bytes. The result does not alias data.
//
// Bytes that pass the checksum and every range check are trusted: the
// parameters they carry (capacity, fp) shape the links the filter chains
// when it grows later.
func Unmarshal(data []byte) (Filter, error) {
	if len(data) < headerLen+trailerLen {
		return nil, corrupt("%d bytes, shorter than header and checksum", len(data))
	}
	if m := string(data[:4]); m == laneMagic || m == wideLaneMagic {
		v, err := unmarshalLane(data)
		if err != nil {
			return nil, err // not a typed nil
		}
		return v, nil
	}
	if string(data[:4]) == fuseMagic {
		f, err := unmarshalFuse(data)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	if string(data[:4]) != magic {
		return nil, corrupt("bad magic %q", data[:4])
	}
	body := data[:len(data)-trailerLen]
	if got, want := xxhash.Sum64(body), binary.LittleEndian.Uint64(data[len(data)-trailerLen:]); got != want {
		return nil, corrupt("checksum mismatch (%016x, stored %016x)", got, want)
	}
	if v := data[4]; v != formatVersion {
		return nil, corrupt("unsupported format version %d", v)
	}
	kind := Kind(data[5])
	base := binary.LittleEndian.Uint64(data[8:])
	fp := math.Float64frombits(binary.LittleEndian.Uint64(data[16:]))
	if err := validate(kind, base, fp); err != nil {
		return nil, corrupt("header: %v", err)
	}
	if data[6] != growth || data[7] != 0 {
		return nil, corrupt("growth %d, want %d", data[6], growth)
	}
	r := math.Float64frombits(binary.LittleEndian.Uint64(data[24:]))
	if !(r > 0 && r < 1) {
		return nil, corrupt("tightening ratio %g, want one in (0, 1)", r)
	}
	nl := binary.LittleEndian.Uint32(data[32:])
	if nl < 1 || nl > maxLinks || binary.LittleEndian.Uint32(data[36:]) != 0 {
		return nil, corrupt("link count %d", nl)
	}
	c := &chain{kind: kind, base: base, fp: fp, r: r, links: make([]link, 0, nl)}
	rest := body[headerLen:]
	for i := range int(nl) {
		if len(rest) < 8 {
			return nil, corrupt("link %d: truncated", i)
		}
		ln := binary.LittleEndian.Uint64(rest)
		rest = rest[8:]
		if ln < 16 || ln > uint64(len(rest)) {
			return nil, corrupt("link %d: length %d, %d bytes left", i, ln, len(rest))
		}
		l, err := decodeLink(kind, rest[:ln], i == int(nl)-1)
		if err != nil {
			return nil, corrupt("%s link %d: %v", kind, i, err)
		}
		c.links = append(c.links, l)
		rest = rest[ln:]
	}
	if len(rest) != 0 {
		return nil, corrupt("%d trailing bytes after the links", len(rest))
	}
	return c, nil
}

// decodeLink decodes one link from b (count, capacity, kind-specific body).
// The newest link is the one that takes inserts.
func decodeLink(kind Kind, b []byte, newest bool) (link, error) {
	n := binary.LittleEndian.Uint64(b)
	capacity := binary.LittleEndian.Uint64(b[8:])
	b = b[16:]
	if capacity < 1 || n > capacity {
		return nil, fmt.Errorf("count %d, capacity %d", n, capacity)
	}
	switch kind {
	case Bloom:
		if len(b) < 16 {
			return nil, fmt.Errorf("truncated parameters")
		}
		m := binary.LittleEndian.Uint64(b)
		k := binary.LittleEndian.Uint32(b[8:])
		if m < 1 || k < 1 || k > maxBloomK || binary.LittleEndian.Uint32(b[12:]) != 0 {
			return nil, fmt.Errorf("m %d, k %d", m, k)
		}
		b = b[16:]
		nw := m/64 + min(m%64, 1)
		if nw != uint64(len(b))/8 || len(b)%8 != 0 {
			return nil, fmt.Errorf("m %d needs %d words, have %d bytes", m, nw, len(b))
		}
		words := make([]uint64, nw)
		readWords(words, b)
		return bloomFrom(bloom.FromWithM(words, uint(m), uint(k)), capacity, n), nil

	case Cuckoo:
		if len(b) < 48 {
			return nil, fmt.Errorf("truncated parameters")
		}
		slots := binary.LittleEndian.Uint64(b)
		all := b[8]
		for _, z := range b[9:16] {
			if z != 0 {
				return nil, fmt.Errorf("nonzero padding")
			}
		}
		if all > 1 || slots < cuckooBucket || slots > maxCuckooSlots || bits.OnesCount64(slots) != 1 {
			return nil, fmt.Errorf("slots %d, all-lossy %d", slots, all)
		}
		f := &cuckooFilter{slots: slots, n: n, cap: capacity, all: all == 1}
		for i := range f.lossy {
			f.lossy[i] = binary.LittleEndian.Uint64(b[16+8*i:])
			f.nLost += bits.OnesCount64(f.lossy[i])
		}
		if f.lossy[0]&1 != 0 {
			return nil, fmt.Errorf("fingerprint 0 marked lost")
		}
		b = b[48:]
		if uint64(len(b)) != slots {
			return nil, fmt.Errorf("%d slots, have %d bytes", slots, len(b))
		}
		cf, err := cuckoo.Decode(b)
		if err != nil {
			return nil, err
		}
		held := uint64(cf.Count())
		if held > n || (held < n && f.nLost == 0 && !f.all) {
			return nil, fmt.Errorf("count %d, table holds %d", n, held)
		}
		f.cf = cf
		if newest { // the histogram the loss recovery needs, from the bytes at hand
			f.hist = new([256]uint64)
			for _, v := range b {
				f.hist[v]++
			}
			f.hist[0] = 0
		}
		return f, nil

	case Blocked:
		if len(b) < 16 {
			return nil, fmt.Errorf("truncated parameters")
		}
		nb := binary.LittleEndian.Uint64(b)
		k := binary.LittleEndian.Uint32(b[8:])
		if nb < 1 || nb > maxBlocks || k < 1 || k > maxBlockK || binary.LittleEndian.Uint32(b[12:]) != 0 {
			return nil, fmt.Errorf("blocks %d, k %d", nb, k)
		}
		b = b[16:]
		if nb != uint64(len(b))/blockBytes || len(b)%blockBytes != 0 {
			return nil, fmt.Errorf("%d blocks, have %d bytes", nb, len(b))
		}
		if capacity > nb*blockBits {
			return nil, fmt.Errorf("capacity %d over %d blocks", capacity, nb)
		}
		f := &blocked{words: alignedWords(nb * blockWords), nblocks: nb, k: int(k), n: n, cap: capacity}
		readWords(f.words, b)
		return f, nil
	}
	return nil, fmt.Errorf("unknown kind")
}
