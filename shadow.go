package dedup

import "time"

// The observed false-positive rate (Stats.ObservedFPSamples and
// ObservedFPRate) is measured on the traffic itself, for every filter
// kind, with a sampled exact shadow kept per shard: the hashes in a fixed
// 1/1024 of the hash space (sampled) that commits put into live
// generations, with their generation. A sampled key observed while not in
// flight is new within the window exactly when the shadow holds it in no
// live generation; of those, the ones the filters matched anyway are the
// filters' false positives (in probabilistic mode, new events answered
// Duplicate).
//
// The shadow is not in snapshots. Open from a snapshot restarts it: the
// restored generations hold keys it lacks, so nothing is counted in a
// shard until they have expired (shadowFrom); the keys replayed from the
// commit log after the snapshot, and every key of a rebuild from the log
// or the exact store, do enter it. A shadow costs ~40 bytes per sampled
// key (0.04 bytes per remembered key) and, on the observe path, one
// multiply and compare per key.

// sampled reports whether h falls in the 1/1024 of the hash space the
// shadow covers: the top bits of a multiplicative remix of h, independent
// enough of the bits the filters and the shard index use.
func sampled(h uint64) bool { return (h*0x9e3779b97f4a7c15)>>54 == 0 }

// shadowAdd records that the sampled hash h went into generation gen.
func (s *shard) shadowAdd(h, gen uint64) {
	if s.shadow == nil {
		s.shadow = map[uint64]uint64{}
	}
	if old, ok := s.shadow[h]; !ok || gen > old {
		s.shadow[h] = gen
	}
}

// sample counts an observe of the sampled hash h that was not in flight
// (answered New or Duplicate), for which the filters answered maybe: a new key if the shadow holds it in no live
// generation, and a false positive if maybe. Nothing is counted while a
// generation the shadow does not cover is live.
func (s *shard) sample(h uint64, maybe bool, now time.Time) {
	oldest := s.ring.OldestLive(now)
	if oldest < s.shadowFrom {
		return
	}
	if gen, ok := s.shadow[h]; ok && gen >= oldest {
		return
	}
	s.sampledNew++
	if maybe {
		s.sampledFP++
	}
}

// pruneShadow drops the entries of generations expired before oldest,
// once per generation that expires.
func (s *shard) pruneShadow(oldest uint64) {
	if oldest <= s.shadowPruned {
		return
	}
	s.shadowPruned = oldest
	for h, gen := range s.shadow {
		if gen < oldest {
			delete(s.shadow, h)
		}
	}
}
