//go:build race

package filter

// raceEnabled shrinks the heaviest tests under the race detector (10x
// slower): their point there is the concurrency, not the statistics.
const raceEnabled = true
