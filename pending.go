package dedup

// pendingSet holds one shard's keys in flight (or being committed), keyed
// by hash. In exact mode the key bytes are appended to an arena, so a New
// key costs no allocation of its own; keys that share a 64-bit hash (rare,
// but a New must never be wrong) spill into extra. In probabilistic mode
// only hashes are kept. Not safe for concurrent use.
type pendingSet struct {
	m     map[uint64]pendingEntry
	extra map[uint64][]pendingEntry
	arena []byte
	n     int
}

// pendingEntry is one key in flight: its generation and, in exact mode,
// where its bytes are in the arena.
type pendingEntry struct {
	gen uint64
	off int
	n   int32
}

func newPendingSet(hint int) *pendingSet {
	return &pendingSet{m: make(map[uint64]pendingEntry, hint)}
}

func (p *pendingSet) key(en pendingEntry) []byte { return p.arena[en.off : en.off+int(en.n)] }

// has reports whether key (hash h) is held. Without exact, the hash alone
// decides. A nil set holds nothing.
func (p *pendingSet) has(h uint64, key []byte, exact bool) bool {
	if p == nil {
		return false
	}
	en, ok := p.m[h]
	if !ok {
		return false
	}
	if !exact || string(p.key(en)) == string(key) {
		return true
	}
	for _, x := range p.extra[h] {
		if string(p.key(x)) == string(key) {
			return true
		}
	}
	return false
}

// add inserts key (hash h) of generation gen; the caller has checked that
// it is not held.
func (p *pendingSet) add(h uint64, key []byte, gen uint64, exact bool) {
	en := pendingEntry{gen: gen}
	if exact {
		en.off, en.n = len(p.arena), int32(len(key))
		p.arena = append(p.arena, key...)
	}
	p.n++
	if _, ok := p.m[h]; !ok {
		p.m[h] = en
		return
	}
	if p.extra == nil {
		p.extra = make(map[uint64][]pendingEntry)
	}
	p.extra[h] = append(p.extra[h], en)
}

// remove deletes key (hash h) and returns its generation. Its arena bytes
// stay until the set is dropped.
func (p *pendingSet) remove(h uint64, key []byte, exact bool) (gen uint64, ok bool) {
	en, ok := p.m[h]
	if !ok {
		return 0, false
	}
	more := p.extra[h]
	if !exact || string(p.key(en)) == string(key) {
		if len(more) == 0 {
			delete(p.m, h)
		} else {
			p.m[h] = more[len(more)-1]
			p.setExtra(h, more[:len(more)-1])
		}
		p.n--
		return en.gen, true
	}
	for i, x := range more {
		if string(p.key(x)) == string(key) {
			more[i] = more[len(more)-1]
			p.setExtra(h, more[:len(more)-1])
			p.n--
			return x.gen, true
		}
	}
	return 0, false
}

func (p *pendingSet) setExtra(h uint64, more []pendingEntry) {
	if len(more) == 0 {
		delete(p.extra, h)
	} else {
		p.extra[h] = more
	}
}

// each calls fn for every key held.
func (p *pendingSet) each(fn func(h uint64, en pendingEntry)) {
	for h, en := range p.m {
		fn(h, en)
		for _, x := range p.extra[h] {
			fn(h, x)
		}
	}
}
