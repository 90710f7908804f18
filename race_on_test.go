//go:build race

package dedup_test

// raceEnabled skips the statistical tests whose point is the numbers, not
// the concurrency, under the race detector (10x slower); .ci/run runs them
// without it.
const raceEnabled = true
