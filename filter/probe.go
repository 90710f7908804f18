package filter

// ProbeAll sets maybe[j] when any filter of fs may hold hashes[group[j]],
// for every j; it leaves maybe[j] set if it already was. It is what a ring
// asks of its generations for a batch of keys: the blocked filters among fs
// (their links with k = 8, what the 1% and 0.1% targets choose for a
// generation's first link) are probed together, key by key, with the key's 8 bit offsets
// computed once for all of them, every link's block of a key prefetched a
// few keys ahead, and no interface call per key and filter; the other
// filters and links one by one, prefetching where they can.
func ProbeAll(fs []Filter, hashes []uint64, group []int32, maybe []bool) {
	var bs [maxFusedLinks]*blocked
	nb := 0
	for _, f := range fs {
		c, ok := f.(*chain)
		if !ok {
			probeOne(f, hashes, group, maybe)
			continue
		}
		for _, l := range c.links {
			if b, ok := l.(*blocked); ok && b.k == 8 && nb < len(bs) {
				bs[nb] = b
				nb++
			} else {
				probeLink(l, hashes, group, maybe)
			}
		}
	}
	if nb > 0 {
		probeBlocked(bs[:nb], hashes, group, maybe)
	}
}

// maxFusedLinks bounds the blocked links ProbeAll probes together (a ring
// of 4 generations has 5, a few more while one overflows); the links past
// it are probed one by one.
const maxFusedLinks = 16

// linesAhead is about how many cache lines ProbeAll keeps prefetched
// ahead of the key it tests: enough misses in flight to cover DRAM
// latency, few enough that the lines are still cached when used.
const linesAhead = 40

// probeAhead is how many keys ahead probeOne prefetches.
const probeAhead = 12

// probeOne asks f about the keys of group not already maybe.
func probeOne(f Filter, hashes []uint64, group []int32, maybe []bool) {
	pf, _ := f.(Prefetcher)
	if pf != nil {
		for _, i := range group[:min(probeAhead, len(group))] {
			pf.Prefetch(hashes[i])
		}
	}
	for j, i := range group {
		if k := j + probeAhead; pf != nil && k < len(group) {
			pf.Prefetch(hashes[group[k]])
		}
		maybe[j] = maybe[j] || f.Test(hashes[i])
	}
}

// probeLink asks one link of a chain about the keys of group not already
// maybe.
func probeLink(l link, hashes []uint64, group []int32, maybe []bool) {
	b, _ := l.(*blocked)
	if b != nil {
		for _, i := range group[:min(probeAhead, len(group))] {
			b.prefetch(hashes[i])
		}
	}
	for j, i := range group {
		if k := j + probeAhead; b != nil && k < len(group) {
			b.prefetch(hashes[group[k]])
		}
		maybe[j] = maybe[j] || l.test(hashes[i])
	}
}

// probeBlocked is ProbeAll for blocked links with k = 8: the test of
// blocked.test, its shifts computed once per key for every link.
func probeBlocked(bs []*blocked, hashes []uint64, group []int32, maybe []bool) {
	ahead := max(2, linesAhead/len(bs))
	for _, i := range group[:min(ahead, len(group))] {
		for _, b := range bs {
			b.prefetch(hashes[i])
		}
	}
	for j, i := range group {
		if k := j + ahead; k < len(group) {
			h := hashes[group[k]]
			for _, b := range bs {
				b.prefetch(h)
			}
		}
		if maybe[j] {
			continue
		}
		h := hashes[i]
		lo := uint32(h)
		p0, p1 := (lo*blockSalts[0])>>26, (lo*blockSalts[1])>>26
		p2, p3 := (lo*blockSalts[2])>>26, (lo*blockSalts[3])>>26
		p4, p5 := (lo*blockSalts[4])>>26, (lo*blockSalts[5])>>26
		p6, p7 := (lo*blockSalts[6])>>26, (lo*blockSalts[7])>>26
		for _, b := range bs {
			w := b.block(h)
			if (w[0]>>p0)&(w[1]>>p1)&(w[2]>>p2)&(w[3]>>p3)&(w[4]>>p4)&(w[5]>>p5)&(w[6]>>p6)&(w[7]>>p7)&1 != 0 {
				maybe[j] = true
				break
			}
		}
	}
}

// AddAll adds every hash of hs to f, as f.Add would one by one: the
// commit's inserts. While f is a one-link blocked chain (k = 8, no
// journal) with room for them, the hashes go straight to the link,
// prefetched addAhead places ahead; the others through f.Add, prefetched
// where f can.
func AddAll(f Filter, hs []uint64) {
	if c, ok := f.(*chain); ok && c.journal == nil && len(c.links) == 1 {
		if b, ok := c.links[0].(*blocked); ok && b.k == 8 && b.n < b.cap {
			// Each insert adds at most one key: n of them cannot fill it.
			n := int(min(uint64(len(hs)), b.cap-b.n))
			addBlocked(b, hs[:n])
			hs = hs[n:]
		}
	}
	if len(hs) == 0 {
		return
	}
	pf, _ := f.(Prefetcher)
	if pf != nil {
		for _, h := range hs[:min(addAhead, len(hs))] {
			pf.Prefetch(h)
		}
	}
	for j, h := range hs {
		if k := j + addAhead; pf != nil && k < len(hs) {
			pf.Prefetch(hs[k])
		}
		f.Add(h)
	}
}

// addAhead is how many inserts ahead AddAll prefetches.
const addAhead = 16

func addBlocked(b *blocked, hs []uint64) {
	for _, h := range hs[:min(addAhead, len(hs))] {
		b.prefetch(h)
	}
	for j, h := range hs {
		if k := j + addAhead; k < len(hs) {
			b.prefetch(hs[k])
		}
		b.testOrAdd(h)
	}
}
