package dedup

import (
	"unsafe"

	"github.com/streamdedup/dedup/internal/prefetch"
)

// inflightSet holds one shard's keys in flight (or being committed), keyed
// by hash. In exact mode the key bytes are appended to an arena, so a New
// key costs no allocation of its own, and keys that share a 64-bit hash
// (rare, but a New must never be wrong) each get an entry. In probabilistic
// mode only hashes are kept and the hash alone decides. Not safe for
// concurrent use.
//
// It is an open-addressing table with linear probing: hashes holds the
// 64-bit hash of each slot's key (0 for an empty slot) and idx the key's
// entry in ents, so that a lookup of a key not held, the common case,
// reads one or two neighbouring words of hashes and nothing else, where a
// Go map would chase pointers. Keys whose hash is 0 live in zero. The table is at most half full.
type inflightSet struct {
	hashes []uint64 // per slot; 0: empty
	idx    []uint32 // per slot: index in ents
	mask   uint64   // len(hashes)-1 (a power of two)
	ents   []inflightEntry
	zero   []inflightEntry // keys whose hash is 0
	arena  []byte
	live   int // bytes of arena that belong to keys held
	n      int
	// hint and arenaHint size the table of a set made with no table (see
	// shard.newSet): the keys and key bytes of the set before it.
	hint, arenaHint int
}

// inflightEntry is one key in flight: its hash, its generation and, in
// exact mode, where its bytes are in the arena (offset << keyLenBits |
// length), 24 bytes.
type inflightEntry struct {
	h   uint64
	gen uint64
	pos uint64
}

// keyLenBits is the width of a key's length in inflightEntry.pos: keys are
// at most maxKeySizeCap bytes (the array below fails to compile
// otherwise), and arenas under 1<<(64-keyLenBits) bytes.
const keyLenBits = 17

var _ [1<<keyLenBits - 1 - maxKeySizeCap]struct{}

// Sizes, in bytes, for the memory accounting (see bytes).
const (
	inflightEntrySize = int(unsafe.Sizeof(inflightEntry{}))
	inflightSlotSize  = 8 + 4 // hashes and idx
	inflightSetSize   = int(unsafe.Sizeof(inflightSet{}))
)

// minInflightSlots is the smallest table.
const minInflightSlots = 64

func newInflightSet(hint int) *inflightSet {
	p := &inflightSet{}
	p.init(hint, 0)
	return p
}

// slotsFor is the table size init gives for n keys: at most half full.
func slotsFor(n int) int {
	slots := minInflightSlots
	for slots < 2*n {
		slots *= 2
	}
	return slots
}

// init empties p and sizes it for hint keys of arenaHint bytes in all
// (exact mode), so that a set as large as the one before it never grows
// (growing the arena and the entries would copy them on the observe path).
// It keeps p's arrays when they are large enough and at most twice the
// size asked for: a set reused after a burst does not hold the burst's
// capacity.
func (p *inflightSet) init(hint, arenaHint int) {
	slots := slotsFor(hint)
	if c := cap(p.hashes); c >= slots && c <= 2*slots {
		p.hashes = p.hashes[:slots]
		clear(p.hashes)
		p.idx = p.idx[:slots]
	} else {
		p.hashes = make([]uint64, slots)
		p.idx = make([]uint32, slots)
	}
	p.mask = uint64(slots - 1)
	p.ents = reuse(p.ents, hint, minInflightSlots/2)
	p.zero = p.zero[:0]
	p.arena = reuse(p.arena, arenaHint, 4<<10)
	p.live = 0
	p.n = 0
}

// reuse returns s emptied, with room for n elements: s's own array if it
// has room and is at most twice n (or floor), a new one otherwise.
func reuse[T any](s []T, n, floor int) []T {
	if c := cap(s); c >= n && c <= max(2*n, floor) {
		return s[:0]
	}
	return make([]T, 0, n)
}

// bytes is the memory p holds: its arrays' capacity and its header.
func (p *inflightSet) bytes() uint64 {
	if p == nil {
		return 0
	}
	return uint64(inflightSetSize + cap(p.hashes)*8 + cap(p.idx)*4 +
		(cap(p.ents)+cap(p.zero))*inflightEntrySize + cap(p.arena))
}

func (p *inflightSet) key(en inflightEntry) []byte {
	off, n := en.pos>>keyLenBits, en.pos&(1<<keyLenBits-1)
	return p.arena[off : off+n]
}

// keyLen is the length of en's key (exact mode).
func keyLen(en inflightEntry) int { return int(en.pos & (1<<keyLenBits - 1)) }

// slot is the home slot of hash h. The table's size is a power of two and
// the low bits of h feed the filters' in-block positions, the shard index
// its remix: take the slot from the middle bits, away from both ends.
func (p *inflightSet) slot(h uint64) uint64 { return (h >> 20) & p.mask }

// prefetch starts loading the home slot of hash h (see internal/prefetch).
func (p *inflightSet) prefetch(h uint64) {
	prefetch.Addr(unsafe.Pointer(&p.hashes[p.slot(h)]))
}

// has reports whether key (hash h) is held. Without exact, the hash alone
// decides. A nil set holds nothing.
func (p *inflightSet) has(h uint64, key []byte, exactMode bool) bool {
	_, ok := p.find(h, key, exactMode)
	return ok
}

// lookup returns the generation of key (hash h), exact mode. A nil set
// holds nothing.
func (p *inflightSet) lookup(h uint64, key []byte) (gen uint64, ok bool) {
	en, ok := p.find(h, key, true)
	return en.gen, ok
}

// find returns the entry of key (hash h). Without exact, the hash alone
// decides, and the entry returned is empty: a hit then reads nothing but
// the probe array. A nil set holds nothing.
func (p *inflightSet) find(h uint64, key []byte, exactMode bool) (inflightEntry, bool) {
	if p == nil || p.n == 0 {
		return inflightEntry{}, false
	}
	if h == 0 {
		for _, en := range p.zero {
			if !exactMode || string(p.key(en)) == string(key) {
				return en, true
			}
		}
		return inflightEntry{}, false
	}
	if len(p.hashes) == 0 {
		return inflightEntry{}, false
	}
	i, ok := p.probe(h, key, exactMode)
	if !ok || !exactMode {
		return inflightEntry{}, ok
	}
	return p.ents[p.idx[i]], true
}

// probe walks the probe sequence of hash h (not 0) in p's table (not
// empty) and returns the slot of key, found, or the empty slot that ends
// the sequence, where an insert of key goes. Without exact, the first
// slot of hash h is key's. Every lookup of the set is this walk.
func (p *inflightSet) probe(h uint64, key []byte, exactMode bool) (slot uint64, found bool) {
	hashes := p.hashes
	for i := p.slot(h); ; i = (i + 1) & p.mask {
		switch hashes[i] {
		case 0:
			return i, false
		case h:
			if !exactMode {
				return i, true
			}
			if en := p.ents[p.idx[i]]; string(p.key(en)) == string(key) {
				return i, true
			}
		}
	}
}

// prefetchSlot starts loading both arrays at the home slot of hash h:
// what a lookup and an insert of h read and write.
func (p *inflightSet) prefetchSlot(h uint64) {
	if len(p.hashes) == 0 {
		return
	}
	i := p.slot(h)
	prefetch.Addr(unsafe.Pointer(&p.hashes[i]))
	prefetch.Addr(unsafe.Pointer(&p.idx[i]))
}

// findSlot reports whether key (hash h) is held, and if not, the slot an
// insert of it would take (meaningless for h == 0 or a set without a
// table): a lookup followed by addAt walks the probe sequence once. A nil
// set holds nothing.
func (p *inflightSet) findSlot(h uint64, key []byte, exactMode bool) (slot uint64, found bool) {
	if p == nil {
		return 0, false
	}
	if h == 0 || len(p.hashes) == 0 {
		return 0, p.has(h, key, exactMode)
	}
	return p.probe(h, key, exactMode)
}

// newEntry is the entry of key (hash h) of generation gen, its bytes
// appended to the arena in exact mode; it counts the key held.
func (p *inflightSet) newEntry(h uint64, key []byte, gen uint64, exactMode bool) inflightEntry {
	en := inflightEntry{h: h, gen: gen}
	if exactMode {
		en.pos = uint64(len(p.arena))<<keyLenBits | uint64(len(key))
		p.arena = append(p.arena, key...)
		p.live += len(key)
	}
	p.n++
	return en
}

// addAt is add for a key that findSlot, called since the set last
// changed, reported not held at slot.
func (p *inflightSet) addAt(slot, h uint64, key []byte, gen uint64, exactMode bool) {
	if h == 0 || 2*(len(p.ents)+1) > len(p.hashes) {
		p.add(h, key, gen, exactMode)
		return
	}
	en := p.newEntry(h, key, gen, exactMode)
	p.hashes[slot] = h
	p.idx[slot] = uint32(len(p.ents))
	p.ents = append(p.ents, en)
}

// add inserts key (hash h) of generation gen; the caller has checked that
// it is not held.
func (p *inflightSet) add(h uint64, key []byte, gen uint64, exactMode bool) {
	en := p.newEntry(h, key, gen, exactMode)
	if h == 0 {
		p.zero = append(p.zero, en)
		return
	}
	if 2*(len(p.ents)+1) > len(p.hashes) {
		p.grow()
	}
	p.place(h, uint32(len(p.ents)))
	p.ents = append(p.ents, en)
}

// place puts entry index e of hash h into the first free slot from h's home.
func (p *inflightSet) place(h uint64, e uint32) {
	i := p.slot(h)
	for p.hashes[i] != 0 {
		i = (i + 1) & p.mask
	}
	p.hashes[i] = h
	p.idx[i] = e
}

// grow doubles the table, or gives a set made with none (see
// shard.newSet) one for its hint.
func (p *inflightSet) grow() {
	oldH, oldI := p.hashes, p.idx
	size := 2 * len(oldH)
	if size == 0 {
		size = slotsFor(p.hint)
	}
	p.hashes = make([]uint64, size)
	p.idx = make([]uint32, size)
	p.mask = uint64(len(p.hashes) - 1)
	for i, h := range oldH {
		if h != 0 {
			p.place(h, oldI[i])
		}
	}
}

// remove deletes key (hash h) and returns its generation. Its arena bytes
// stay until the set is dropped or compacted. A nil set holds nothing.
func (p *inflightSet) remove(h uint64, key []byte, exactMode bool) (gen uint64, ok bool) {
	if p == nil || p.n == 0 {
		return 0, false
	}
	if h == 0 {
		for i, en := range p.zero {
			if !exactMode || string(p.key(en)) == string(key) {
				p.zero = append(p.zero[:i], p.zero[i+1:]...)
				p.n--
				p.live -= keyLen(en)
				return en.gen, true
			}
		}
		return 0, false
	}
	if len(p.hashes) == 0 {
		return 0, false
	}
	i, found := p.probe(h, key, exactMode)
	if !found {
		return 0, false
	}
	e := p.idx[i]
	en := p.ents[e]
	p.deleteSlot(i)
	// Move the last entry into e's place.
	if last := uint32(len(p.ents) - 1); e != last {
		moved := p.ents[last]
		p.ents[e] = moved
		for j := p.slot(moved.h); ; j = (j + 1) & p.mask {
			if p.hashes[j] == moved.h && p.idx[j] == last {
				p.idx[j] = e
				break
			}
		}
	}
	p.ents = p.ents[:len(p.ents)-1]
	p.n--
	p.live -= keyLen(en)
	return en.gen, true
}

// deleteSlot empties slot i and shifts back the slots after it that would
// otherwise be cut off from their home slot (deletion without tombstones).
func (p *inflightSet) deleteSlot(i uint64) {
	for j := (i + 1) & p.mask; p.hashes[j] != 0; j = (j + 1) & p.mask {
		home := p.slot(p.hashes[j])
		// Slot j's key may move to i if its home is not in (i, j], cyclically.
		if (j-home)&p.mask >= (j-i)&p.mask {
			p.hashes[i], p.idx[i] = p.hashes[j], p.idx[j]
			i = j
		}
	}
	p.hashes[i] = 0
}

// compactSlack is the arena space a set may waste on removed keys before
// compact rewrites it.
const compactSlack = 64 << 10

// compact rewrites the arena with only the keys held, if removed keys take
// more of it than those held and compactSlack. Sets that are committed
// whole are dropped with their arena; a set that lives on while keys leave
// it one by one (the keys not yet Done under ExplicitDone) would otherwise
// grow for ever. Removals pay for it: each byte is copied at most once per
// byte removed before it.
func (p *inflightSet) compact() {
	if waste := len(p.arena) - p.live; waste <= p.live || waste <= compactSlack {
		return
	}
	arena := make([]byte, 0, 2*p.live)
	for _, ents := range [][]inflightEntry{p.ents, p.zero} {
		for i := range ents {
			en := &ents[i]
			k := p.key(*en)
			en.pos = uint64(len(arena))<<keyLenBits | uint64(len(k))
			arena = append(arena, k...)
		}
	}
	p.arena = arena
}

// shrink rebuilds p at the size its keys need if its table is more than
// four times that: a set that lives on while keys leave it one by one
// (the keys not yet Done under ExplicitDone) would otherwise keep the
// table of its peak for ever. The rebuild is paid for by the removals
// that emptied the table.
func (p *inflightSet) shrink(exactMode bool) {
	if len(p.hashes) <= 4*slotsFor(p.n) {
		return
	}
	q := &inflightSet{}
	q.init(p.n, p.live)
	p.each(func(h uint64, en inflightEntry) {
		var key []byte
		if exactMode {
			key = p.key(en)
		}
		q.add(h, key, en.gen, exactMode)
	})
	*p = *q
}

// each calls fn for every key held.
func (p *inflightSet) each(fn func(h uint64, en inflightEntry)) {
	for _, en := range p.ents {
		fn(en.h, en)
	}
	for _, en := range p.zero {
		fn(0, en)
	}
}

// entry returns the entry of key (hash h) in p, to read or move to
// another generation; without exact, the first entry of hash h. A nil set
// holds nothing.
func (p *inflightSet) entry(h uint64, key []byte, exactMode bool) *inflightEntry {
	if p == nil || p.n == 0 {
		return nil
	}
	if h == 0 {
		for i := range p.zero {
			if !exactMode || string(p.key(p.zero[i])) == string(key) {
				return &p.zero[i]
			}
		}
		return nil
	}
	if len(p.hashes) == 0 {
		return nil
	}
	i, ok := p.probe(h, key, exactMode)
	if !ok {
		return nil
	}
	return &p.ents[p.idx[i]]
}

// uncommittedGen returns the generation the first sighting of key (hash
// h), observed and not committed yet, went into: Done, in flight, or
// being committed. The shard's lock is held.
func (s *shard) uncommittedGen(h uint64, key []byte, exactMode bool) (uint64, bool) {
	en := s.undone.entry(h, key, exactMode)
	if en == nil {
		en = s.inflight.entry(h, key, exactMode)
	}
	for _, sets := range [][]epochSet{s.older, s.committing} {
		for i := 0; en == nil && i < len(sets); i++ {
			en = sets[i].set.entry(h, key, exactMode)
		}
	}
	if en == nil {
		return 0, false
	}
	return en.gen, true
}

// genOf returns the generation of key's entry (hash h) in p; without
// exact, of the first entry of hash h. A nil set holds nothing.
func (p *inflightSet) genOf(h uint64, key []byte, exactMode bool) (uint64, bool) {
	en := p.entry(h, key, exactMode)
	if en == nil {
		return 0, false
	}
	return en.gen, true
}

// setGenIfBelow moves key's entry (hash h) in p to generation gen if its
// generation is below oldest, and returns the generation it had; without
// exact, the first entry of hash h. A nil set holds nothing.
func (p *inflightSet) setGenIfBelow(h uint64, key []byte, exactMode bool, oldest, gen uint64) (uint64, bool) {
	en := p.entry(h, key, exactMode)
	if en == nil {
		return 0, false
	}
	old := en.gen
	if old >= oldest {
		return old, false
	}
	en.gen = gen
	return old, true
}
