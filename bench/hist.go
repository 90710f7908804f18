package bench

import (
	"math/bits"
	"time"
)

// Histogram is a log-linear latency histogram: values are grouped by
// power of two, each power split into 64 linear sub-buckets, so a quantile
// is exact to within 1/64 (about 1.6%). Its zero value is ready to use; it
// is not safe for concurrent use.
type Histogram struct {
	counts [64 * 64]uint64
	n      uint64
	max    int64
}

const subBits = 6 // 64 sub-buckets per power of two

func bucketOf(v int64) int {
	if v < 1<<subBits {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - subBits // >= 1
	return e<<subBits | int(v>>(e-1))&(1<<subBits-1)
}

// bucketLow returns the smallest value of bucket b.
func bucketLow(b int) int64 {
	if b < 1<<subBits {
		return int64(b)
	}
	e := b >> subBits
	return int64(1<<subBits|b&(1<<subBits-1)) << (e - 1)
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	h.counts[bucketOf(v)]++
	h.n++
	h.max = max(h.max, v)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Reset empties the histogram.
func (h *Histogram) Reset() { *h = Histogram{} }

// Quantile returns the q-quantile (0 < q <= 1), 0 if empty. The value is
// the upper bound of the bucket holding it, capped by the maximum seen.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen > rank {
			return time.Duration(min(bucketLow(b+1)-1, h.max))
		}
	}
	return time.Duration(h.max)
}

// Max returns the largest observation.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }
