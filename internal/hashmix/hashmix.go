// Package hashmix holds the 64-bit finalizers the engine and its filters
// remix hashes with: bijections whose output bits each depend on every
// input bit, so that two uses of one hash (a shard and the positions in
// that shard's filter) are independent.
//
// Both are part of the state format: a filter encoded with positions from
// one of them is read back only with the same one.
package hashmix

// Splitmix64 is the splitmix64 finalizer (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014; the constants of
// Vigna's splitmix64.c). The engine picks a key's shard from
// Splitmix64(hash).
func Splitmix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Fmix64 is MurmurHash3's 64-bit finalizer (fmix64). The bloom filter
// derives its probe step from it, and the binary fuse filter its
// positions and fingerprints, as the xorfilter library does.
func Fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
