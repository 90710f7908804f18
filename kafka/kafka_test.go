package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOneInstance: one consumer, one stream with repeats and keyless
// records; the output holds every distinct key once, the rejects the
// keyless records, the dups topic the rest.
func TestOneInstance(t *testing.T) {
	c := kafkatest.NewCluster(t, 3)
	addrs := c.ListenAddrs()
	in := genInput("a", 3000, 1000, 50, time.Now())
	kafkatest.Produce(t, addrs, in.recs...)
	r := start(t, testConfig(t, addrs, "g1"), nil)
	kafkatest.WaitCommitted(t, addrs, "g1", nil)
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
			c := kafkatest.NewCluster(t, 2)
			addrs := c.ListenAddrs()
			in := genInput("c", 3000, 800, 40, time.Now())
			kafkatest.Produce(t, addrs, in.recs...)
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
			kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
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
			c := kafkatest.NewCluster(t, 2)
			addrs := c.ListenAddrs()
			in := genInput("f", 2000, 600, 40, time.Now())
			kafkatest.Produce(t, addrs, in.recs...)
			h := c.Fault(tc.fault)
			cfg := testConfig(t, addrs, "g-"+tc.name)
			cfg.InstanceID = "i1"
			r := start(t, cfg, nil)
			kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
			r.stop(t)
			if h.Hits() == 0 {
				t.Fatalf("the fault never fired")
			}
			t.Logf("fault hits %d, stats %+v", h.Hits(), r.c.Stats())
			checkExactlyOnce(t, addrs, in)
		})
	}
}

// TestThreeInstancesMoving runs three instances of one group over six
// partitions while members join and leave, so partitions move between
// instances with current, stale and missing local state. Each input wave
// repeats keys of the earlier ones: an instance that took a partition
// without rebuilding its state would let those through a second time.
func TestThreeInstancesMoving(t *testing.T) {
	c := kafkatest.NewCluster(t, 6)
	addrs := c.ListenAddrs()
	t0 := time.Now()
	group := "g3"
	cfgs := make([]Options, 3)
	for i := range cfgs {
		cfgs[i] = testConfig(t, addrs, group)
	}
	wave := func(n int) *input {
		in := genInput("m", 1500, 900, 60, t0.Add(time.Duration(n)*2*time.Second))
		kafkatest.Produce(t, addrs, in.recs...)
		return in
	}
	w1 := wave(0)
	r1 := start(t, cfgs[0], nil)
	kafkatest.WaitCommitted(t, addrs, group, nil)

	r2 := start(t, cfgs[1], nil)
	r3 := start(t, cfgs[2], nil)
	w2 := wave(1)
	kafkatest.WaitCommitted(t, addrs, group, nil)

	r2.stop(t) // its partitions move to r1 and r3
	w3 := wave(2)
	kafkatest.WaitCommitted(t, addrs, group, nil)

	r1.stop(t) // everything moves to r3
	r2 = start(t, cfgs[1], nil)
	w4 := wave(3)
	kafkatest.WaitCommitted(t, addrs, group, nil)
	r2.stop(t)
	r3.stop(t)

	checkExactlyOnce(t, addrs, w1, w2, w3, w4)
	var replayed, rebuilt int
	for _, r := range []*running{r1, r2, r3} {
		for _, rd := range r.readies() {
			if rd.Replayed > 0 {
				replayed++
			}
			if rd.Rebuilt {
				rebuilt++
			}
		}
	}
	if replayed == 0 || rebuilt == 0 {
		t.Errorf("partitions moved but %d replayed and %d were rebuilt", replayed, rebuilt)
	}
}

// TestRebuildAndRecordTimeWindow moves a partition to an instance with no
// state: it rebuilds from the offset of ts(C-1) - window, so keys seen
// within the window stay duplicates and keys older than the window (by the
// records' timestamps, not the wall clock) are new again.
func TestRebuildAndRecordTimeWindow(t *testing.T) {
	c := kafkatest.NewCluster(t, 1)
	addrs := c.ListenAddrs()
	t0 := time.Now().Add(-time.Hour)
	const window = time.Minute
	mk := func(key string, at time.Duration) *kgo.Record {
		return &kgo.Record{Topic: inTopic, Key: []byte(key), Value: []byte(key + "@" + at.String()), Timestamp: t0.Add(at)}
	}
	var first []*kgo.Record
	for i := range 200 {
		first = append(first, mk(fmt.Sprintf("old%03d", i), 0)) // expire before the last wave
	}
	for i := range 200 {
		first = append(first, mk(fmt.Sprintf("recent%03d", i), 2*window)) // within the window of it
	}
	kafkatest.Produce(t, addrs, first...)
	cfg := testConfig(t, addrs, "gw")
	cfg.Engine.Window = window
	r := start(t, cfg, nil)
	kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
	r.stop(t)

	// A new machine: another state directory.
	cfg.StateDir = t.TempDir()
	var second []*kgo.Record
	for i := range 200 {
		second = append(second, mk(fmt.Sprintf("old%03d", i), 2*window+window/2))
		second = append(second, mk(fmt.Sprintf("recent%03d", i), 2*window+window/2))
	}
	kafkatest.Produce(t, addrs, second...)
	r = start(t, cfg, nil)
	kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
	r.stop(t)

	rd := r.readies()
	if len(rd) != 1 || !rd[0].Rebuilt || rd[0].From != 200 || rd[0].Replayed != 200 {
		t.Errorf("readies %+v, want one rebuilt from offset 200 (the first record within the window of ts(C-1)) replaying 200", rd)
	}
	out, _ := kafkatest.ReadAll(t, addrs, outTopic, time.Second)
	for i := range 200 {
		if n := out[fmt.Sprintf("old%03d", i)]; n != 2 {
			t.Fatalf("key old%03d written %d times, want 2 (its repeat came 2.5 windows later)", i, n)
		}
		if n := out[fmt.Sprintf("recent%03d", i)]; n != 1 {
			t.Fatalf("key recent%03d written %d times, want 1 (its repeat came within the window)", i, n)
		}
	}
}

// TestStateAheadOfGroupIsWiped deletes the group (its offsets) after a
// run: the local state is then ahead of the group, describes another
// history, and is wiped; everything is processed again.
func TestStateAheadOfGroupIsWiped(t *testing.T) {
	c := kafkatest.NewCluster(t, 1)
	addrs := c.ListenAddrs()
	in := genInput("w", 500, 300, 0, time.Now())
	kafkatest.Produce(t, addrs, in.recs...)
	cfg := testConfig(t, addrs, "gx")
	r := start(t, cfg, nil)
	kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
	r.stop(t)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteGroup(context.Background(), cfg.Group); err != nil {
		t.Fatal(err)
	}
	r = start(t, cfg, nil)
	kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
	r.stop(t)
	rd := r.readies()
	if len(rd) != 1 || !rd[0].Rebuilt || rd[0].Local != 500 || rd[0].Committed != -1 {
		t.Errorf("readies %+v, want one wiped state (local 500, no committed offset)", rd)
	}
	out, _ := kafkatest.ReadAll(t, addrs, outTopic, time.Second)
	for k := range in.distinct {
		if out[k] != 2 {
			t.Fatalf("key %s written %d times, want 2 (once per group lifetime)", k, out[k])
		}
	}

	// Offsets reset behind the state (E 500 > C 100): wiped, and rebuilt
	// from the window before C.
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: inTopic, Partition: 0, At: 100, LeaderEpoch: -1})
	if _, err := kadm.NewClient(cl).CommitOffsets(context.Background(), cfg.Group, os); err != nil {
		t.Fatal(err)
	}
	r = start(t, cfg, nil)
	kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
	r.stop(t)
	rd = r.readies()
	if len(rd) != 1 || !rd[0].Rebuilt || rd[0].Local != 500 || rd[0].Committed != 100 || rd[0].From != 0 || rd[0].Replayed != 100 {
		t.Errorf("readies %+v, want one wiped state (local 500, committed 100) rebuilt from 0", rd)
	}
}

// TestOptionsValidation names every bad field.
func TestOptionsValidation(t *testing.T) {
	_, err := New(Options{Topic: "x", OutTopic: "x", MaxTxnRecords: -1, MaxTxnTime: time.Minute})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("err %v, want ErrInvalidOptions", err)
	}
	for _, field := range []string{"Brokers", "Group", "OutTopic", "StateDir", "MaxTxnRecords", "MaxTxnTime"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
	cfg := Options{Brokers: []string{"b"}, Group: "g", Topic: "i", OutTopic: "o", StateDir: "d"}
	cfg.Engine.FalsePositiveRate = 2
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "FalsePositiveRate") {
		t.Errorf("bad engine option: %v", err)
	}
	// Filter fuse needs a Dir, which each partition's engine has under
	// StateDir: `dedup kafka --state DIR --filter fuse` was refused with
	// "Filter fuse needs a Dir".
	cfg.Engine.FalsePositiveRate = 0
	cfg.Engine.Filter = "fuse"
	if _, err := New(cfg); err != nil {
		t.Errorf("Filter fuse with a StateDir: %v", err)
	}
	if _, err := ParseKeyFrom("header:"); err == nil {
		t.Error("ParseKeyFrom accepted an empty header name")
	}
}

// TestCheckpointRoundTrip and its rejects.
func TestCheckpointRoundTrip(t *testing.T) {
	cp := checkpoint{Offset: 1 << 40, Millis: 1700000000123}
	got, ok, err := decodeCheckpoint(cp.encode())
	if err != nil || !ok || got != cp {
		t.Fatalf("round trip: %+v %v %v", got, ok, err)
	}
	if _, ok, err := decodeCheckpoint(nil); ok || err != nil {
		t.Errorf("nil checkpoint: %v %v", ok, err)
	}
	for _, b := range [][]byte{{1}, append([]byte{2}, cp.encode()[1:]...), append(cp.encode(), 0)} {
		if _, _, err := decodeCheckpoint(b); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("decode %x: %v, want ErrCheckpoint", b, err)
		}
	}
}

// TestAbortedTransactionCountedOnce: the verdicts of an aborted
// transaction's records were counted, and counted again when the records
// were decided anew, so the figures added up to more records than there
// were. New, Duplicates and Rejected now count committed transactions.
func TestAbortedTransactionCountedOnce(t *testing.T) {
	c := kafkatest.NewCluster(t, 2)
	addrs := c.ListenAddrs()
	in := genInput("n", 2000, 600, 40, time.Now())
	kafkatest.Produce(t, addrs, in.recs...)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: outTopic, Err: kerr.PolicyViolation, Count: 2})
	cfg := testConfig(t, addrs, "g-count")
	cfg.InstanceID = "i1"
	r := start(t, cfg, nil)
	kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
	r.stop(t)
	checkExactlyOnce(t, addrs, in)
	st := r.c.Stats()
	if h.Hits() == 0 || st.Aborted == 0 {
		t.Fatalf("no transaction aborted (fault hits %d): %+v", h.Hits(), st)
	}
	n := uint64(len(in.recs))
	keyless, distinct := uint64(in.keyless), uint64(len(in.distinct))
	if st.CommittedRecords != n || st.New != distinct || st.Rejected != keyless || st.Duplicates != n-keyless-distinct {
		t.Errorf("stats %+v: want %d committed records, %d new, %d duplicates, %d rejected",
			st, n, distinct, n-keyless-distinct, keyless)
	}
	if st.Records <= st.CommittedRecords {
		t.Errorf("Records %d, CommittedRecords %d: the aborted transactions' records were not counted as processed", st.Records, st.CommittedRecords)
	}
}
