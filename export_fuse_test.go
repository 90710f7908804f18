package dedup

import "github.com/streamdedup/dedup/filter"

// GenerationKinds returns, per shard, the filter kind of each live
// generation, oldest first (tests of Filter "fuse").
func GenerationKinds(e *Engine) [][]filter.Kind {
	out := make([][]filter.Kind, len(e.shards))
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for _, g := range s.ring.Generations() {
			out[i] = append(out[i], g.Filter.Kind())
		}
		s.mu.Unlock()
	}
	return out
}
