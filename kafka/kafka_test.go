package kafka

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// TestCrashPoints ends a session, as a crash would, at each point between
// the transaction and the engine's commit: with the transaction open
// (nothing durable: the batch is decided again), and after the transaction
// committed but before the engines did (the gap [E, C) is replayed with
// output suppressed). Either way the output holds each key once; a replay
// that wrote, or an engine that committed first, would show a key twice.
func TestCrashPoints(t *testing.T) {
	for _, point := range []string{"before-end", "after-end"} {
		t.Run(point, func(t *testing.T) {
			c := newCluster(t, 2)
			addrs := c.ListenAddrs()
			in := genInput("c", 3000, 800, 40, time.Now())
			produce(t, addrs, in.recs)
			calls := 0
			hook := func(p string) error {
				if p != point {
					return nil
				}
				calls++
				if calls == 2 || calls == 4 {
					return errors.New("injected crash at " + p)
				}
				return nil
			}
			cfg := testConfig(t, addrs, "g-"+point)
			cfg.InstanceID = "i1"
			r := start(t, cfg, hook)
			waitCommitted(t, addrs, cfg.Group)
			r.stop(t)
			checkExactlyOnce(t, addrs, in)
			st := r.c.Stats()
			if st.Sessions < 3 {
				t.Errorf("%d sessions: the injected crashes did not end sessions", st.Sessions)
			}
			replayed := false
			for _, rd := range r.readies() {
				if rd.Local >= 0 && rd.Local < rd.Committed && rd.Replayed > 0 {
					replayed = true
				}
			}
			if point == "after-end" && !replayed {
				t.Errorf("no partition replayed a gap after a crash between the commits: %+v", r.readies())
			}
			if point == "before-end" && replayed {
				t.Errorf("a partition replayed a gap after a crash before the transaction's end: %+v", r.readies())
			}
		})
	}
}

// TestBrokerFaults fails produce, offset-commit and end-transaction
// requests with kfake's faults while a consumer runs; the consumer aborts
// or starts a new session, and the output still holds each key once.
func TestBrokerFaults(t *testing.T) {
	cases := []struct {
		name  string
		fault kfake.Fault
	}{
		{"produce", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: outTopic, Err: kerr.PolicyViolation, Count: 2}},
		{"produce-timeout-after-append", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: outTopic, Err: kerr.RequestTimedOut, Count: 2}},
		{"txn-offset-commit", kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.IllegalGeneration, Count: 2}},
		{"txn-offset-commit-timeout-after-apply", kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.RequestTimedOut, Count: 2}},
		{"end-txn-unknown", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 2}},
		{"end-txn-invalid-state", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.InvalidTxnState, Count: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2)
			addrs := c.ListenAddrs()
			in := genInput("f", 2000, 600, 40, time.Now())
			produce(t, addrs, in.recs)
			h := c.Fault(tc.fault)
			cfg := testConfig(t, addrs, "g-"+tc.name)
			cfg.InstanceID = "i1"
			r := start(t, cfg, nil)
			waitCommitted(t, addrs, cfg.Group)
			r.stop(t)
			if h.Hits() == 0 {
				t.Fatalf("the fault never fired")
			}
			t.Logf("fault hits %d, stats %+v", h.Hits(), r.c.Stats())
			checkExactlyOnce(t, addrs, in)
		})
	}
}
