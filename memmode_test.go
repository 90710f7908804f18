package dedup_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

// TestInMemoryKeepsNoCache: without a Dir the exact store is a table in
// memory, whose lookups cost what the cache of recent commits saves, so
// the engine keeps no such cache; duplicates of the last commit are still
// Duplicates, answered by the store.
func TestInMemoryKeepsNoCache(t *testing.T) {
	e := openT(t, Options{Window: time.Minute, Shards: 1, Now: testclock.New(t0).Now})
	for round := range 3 {
		for i := range 1000 {
			mustObserve(t, e, fmt.Sprint(round, "-", i), New)
		}
		mustCommit(t, e, "")
	}
	if st := e.Stats(); st.CacheKeys != 0 || st.CacheBytes != 0 {
		t.Fatalf("CacheKeys %d, CacheBytes %d without a Dir, want none", st.CacheKeys, st.CacheBytes)
	}
	before := e.Stats().StoreLookups
	mustObserve(t, e, "2-999", Duplicate)
	mustObserve(t, e, "0-0", Duplicate)
	if got := e.Stats().StoreLookups; got != before+2 {
		t.Fatalf("%d store lookups for two duplicates, want 2", got-before)
	}
}
