package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// feeder produces a small wave of records every interval until stopped,
// repeating keys of earlier waves, so that transactions follow every
// rebalance.
type feeder struct {
	mu    sync.Mutex
	waves []*input
	stop  chan struct{}
	done  chan struct{}
}

func startFeeder(t *testing.T, addrs []string, every time.Duration) *feeder {
	f := &feeder{stop: make(chan struct{}), done: make(chan struct{})}
	t0 := time.Now()
	go func() {
		defer close(f.done)
		for w := 0; ; w++ {
			in := genInput(fmt.Sprintf("r%d-", w%5), 120, 90, 0, t0.Add(time.Duration(w)*time.Second))
			kafkatest.Produce(t, addrs, in.recs...)
			f.mu.Lock()
			f.waves = append(f.waves, in)
			f.mu.Unlock()
			select {
			case <-f.stop:
				return
			case <-time.After(every):
			}
		}
	}()
	return f
}

// end stops the feeder and returns every wave it produced.
func (f *feeder) end() []*input {
	close(f.stop)
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waves
}

// waitReady waits until r has made n partitions ready in all.
func waitReady(t *testing.T, r *running, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(r.readies()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d partitions ready after 30s, want %d: %+v", len(r.readies()), n, r.readies())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRebalanceKeepsOwnedPartitions lets a second instance join and leave
// a group while records flow. Cooperative-sticky balancing moves only the
// partitions the newcomer takes: the first instance keeps the others, with
// no new session and no replay of what it kept; only the partitions that
// move are made ready again, and a transaction aborted by a rebalance
// costs only its own records, read again.
func TestRebalanceKeepsOwnedPartitions(t *testing.T) {
	c := kafkatest.NewCluster(t, 4)
	addrs := c.ListenAddrs()
	group := "g-keep"
	a := start(t, testConfig(t, addrs, group), nil)
	f := startFeeder(t, addrs, 50*time.Millisecond)
	waitReady(t, a, 4)
	kafkatest.WaitCommitted(t, addrs, group, nil)
	if !a.c.Ready() {
		t.Errorf("a is not Ready with its 4 partitions ready: %+v", a.c.PartitionStates())
	}
	for _, p := range a.c.PartitionStates() {
		if !p.Ready || p.Lag < 0 {
			t.Errorf("partition state %+v: want ready, with a lag from a fetch", p)
		}
	}
	// The feeder repeats a wave's keys five waves later: committed by
	// then, so caught as duplicates, which the window advice counts.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var caught uint64
		for _, p := range a.c.PartitionStates() {
			caught += p.Advice.Caught
		}
		if caught > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no partition's window advice counts a caught duplicate after 20s: %+v", a.c.PartitionStates())
		}
	}

	b := start(t, testConfig(t, addrs, group), nil)
	waitReady(t, b, 2)
	time.Sleep(500 * time.Millisecond) // transactions after the revoke
	kafkatest.WaitCommitted(t, addrs, group, nil)
	b.stop(t) // its partitions go back to a
	waitReady(t, a, 6)
	time.Sleep(500 * time.Millisecond)
	waves := f.end()
	kafkatest.WaitCommitted(t, addrs, group, nil)
	a.stop(t)
	checkExactlyOnce(t, addrs, waves...)

	for name, r := range map[string]*running{"a": a, "b": b} {
		st := r.c.Stats()
		t.Logf("%s: stats %+v", name, st)
		// A rebalance that completes while a transaction is open (one in
		// which this member gives up nothing is not held back) fails its
		// offset commit, ILLEGAL_GENERATION: that transaction aborts and
		// its records are read again, at most once per membership change.
		if st.Aborted > 2 || st.Sessions != 1 {
			t.Errorf("%s: %d transactions aborted, %d sessions; want at most 2 aborted (one per membership change) and one session", name, st.Aborted, st.Sessions)
		}
	}
	if n := len(a.readies()); n != 6 {
		t.Errorf("a made %d partitions ready, want 6 (4 at start, 2 back from b): %+v", n, a.readies())
	}
	if n := len(b.readies()); n != 2 {
		t.Errorf("b made %d partitions ready, want 2: %+v", n, b.readies())
	}
	// The partitions a kept were never made ready again, so never replayed;
	// the two that came back replay at most what b committed meanwhile.
	for _, rd := range a.readies()[:4] {
		if rd.Replayed != 0 {
			t.Errorf("a replayed %d records of %s-%d at start", rd.Replayed, rd.Topic, rd.Partition)
		}
	}
}

// TestCanceledPrepareLeavesNoEngine: a rebalance that cancels the
// preparation of a newly assigned partition (a revoke right behind its
// assignment) leaves no engine open for it, which no revoke would close.
func TestCanceledPrepareLeavesNoEngine(t *testing.T) {
	c := kafkatest.NewCluster(t, 1)
	addrs := c.ListenAddrs()
	cons, err := New(testConfig(t, addrs, "gc"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons.admin, cons.adminCl = kadm.NewClient(cl), cl
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cons.adjust(ctx, map[string]map[int32]kgo.Offset{inTopic: {0: kgo.NewOffset().At(10)}}); err == nil {
		t.Fatal("adjust with a canceled context succeeded")
	}
	if n := len(cons.parts); n != 0 {
		cons.closeAll()
		t.Fatalf("%d engines left open after a canceled prepare", n)
	}
}
