package dedup

// Sampled reports whether key falls in the sample of the hash space that
// e's shadow covers (the observed false-positive rate).
func Sampled(e *Engine, key []byte) bool { return sampled(e.hash(key)) }
