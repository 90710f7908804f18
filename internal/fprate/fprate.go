// Package fprate combines the estimated false-positive rates of filters
// the way a new key meets them in the engine: it is tested against the
// filter of every live generation of its shard, so it is a false positive
// when any one of them errs ([Any]), and it lands on one shard of several,
// each as likely ([Mean]).
//
// The engine's Stats.EstimatedFPRate, a chain filter's FPRate and
// `dedup snapshot inspect` all make this estimate; this package is its one
// statement.
package fprate

// Any returns the false-positive rate of a key tested against independent
// filters whose rates are ps: 1 - Π(1 - p), the chance that at least one
// of them errs. With no filter it is 0.
func Any(ps ...float64) float64 {
	miss := 1.0
	for _, p := range ps {
		miss *= 1 - p
	}
	return 1 - miss
}

// Mean returns the false-positive rate a new key meets in an engine whose
// shard i holds filters with the rates shards[i]: [Any] of each shard's
// rates, averaged over the shards. A shard with no filter counts, at 0.
// With no shard it is 0.
func Mean(shards [][]float64) float64 {
	if len(shards) == 0 {
		return 0
	}
	var sum float64
	for _, ps := range shards {
		sum += Any(ps...)
	}
	return sum / float64(len(shards))
}
