package dedup

// SampleLevel is the level of key in the window advisor's horizon sample:
// the key is in a sample of 1 in 2^k when its level is k or more.
func SampleLevel(e *Engine, key []byte) int { return sampleLevel(e.hash(key)) }

// HorizonBytes is the memory the advisor's horizons hold, over shards.
func HorizonBytes(e *Engine) uint64 {
	var n uint64
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		if s.adv.horizon != nil {
			n += s.adv.horizon.Bytes()
		}
		s.mu.Unlock()
	}
	return n
}
