package kafka

import (
	"testing"
	"time"
)

// TestOneInstance: one consumer, one stream with repeats and keyless
// records; the output holds every distinct key once, the rejects the
// keyless records, the dups topic the rest.
func TestOneInstance(t *testing.T) {
	c := newCluster(t, 3)
	addrs := c.ListenAddrs()
	in := genInput("a", 3000, 1000, 50, time.Now())
	produce(t, addrs, in.recs)
	r := start(t, testConfig(t, addrs, "g1"), nil)
	waitCommitted(t, addrs, "g1")
	r.stop(t)
	checkExactlyOnce(t, addrs, in)
	st := r.c.Stats()
	t.Logf("stats %+v", st)
	if st.Committed == 0 {
		t.Errorf("no transaction committed")
	}
}
