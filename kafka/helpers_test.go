package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics every test cluster has.
const (
	inTopic      = "in"
	outTopic     = "out"
	rejectsTopic = "rejects"
	dupsTopic    = "dups"
)

// newCluster starts an in-process kfake broker on 127.0.0.1 with the
// test topics, partitions partitions each.
func newCluster(t *testing.T, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, inTopic, outTopic, rejectsTopic, dupsTopic),
		kfake.GroupMinSessionTimeout(time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testConfig is a Options with timeouts short enough for tests.
func testConfig(t *testing.T, addrs []string, group string) Options {
	return Options{
		Brokers:            addrs,
		Group:              group,
		Topic:              inTopic,
		OutTopic:           outTopic,
		RejectsTopic:       rejectsTopic,
		DupsTopic:          dupsTopic,
		StateDir:           t.TempDir(),
		MaxTxnRecords:      500,
		MaxTxnTime:         50 * time.Millisecond,
		SessionTimeout:     3 * time.Second,
		RebalanceTimeout:   5 * time.Second,
		TransactionTimeout: 4 * time.Second,
		RetryBackoff:       100 * time.Millisecond,
		Logf:               t.Logf,
		ClientOpts:         clientOpts(),
	}
}

// clientOpts are the client options of testConfig: short timeouts, and the
// client's log on stderr with DEDUP_TEST_KAFKA_LOG=info or debug (the knob
// cmd/dedup's kafka tests pass on to the child's DEDUP_KAFKA_LOG).
func clientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.HeartbeatInterval(300 * time.Millisecond),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}
	switch os.Getenv("DEDUP_TEST_KAFKA_LOG") {
	case "info":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	case "debug":
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	return opts
}

// running is a Consumer running in a goroutine.
type running struct {
	c      *Consumer
	cancel context.CancelFunc
	exited chan struct{} // closed when Run has returned, with err set
	err    error
	mu     sync.Mutex
	ready  []Ready
}

// start runs a consumer with cfg. A cleanup stops it before the test's
// temporary directories go, also when the test ends early: an engine
// whose directory is removed under it reports corruption and panics.
func start(t *testing.T, cfg Options, hook func(string) error) *running {
	t.Helper()
	r := &running{exited: make(chan struct{})}
	cfg.OnReady = func(rd Ready) {
		r.mu.Lock()
		r.ready = append(r.ready, rd)
		r.mu.Unlock()
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.testHook = hook
	r.c = c
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.err = c.Run(ctx)
		close(r.exited)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.exited:
		case <-time.After(30 * time.Second):
		}
	})
	return r
}

// stop cancels the consumer and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.exited:
		if r.err != nil {
			t.Errorf("Run: %v", r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its cancel")
	}
}

func (r *running) readies() []Ready {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Ready(nil), r.ready...)
}

// input is a generated input stream: keyed records with repeats, and
// keyless ones.
type input struct {
	recs     []*kgo.Record
	distinct map[string]bool
	keyless  int
}

// genInput makes n records over distinct keys (prefix-named), every
// keylessEvery-th without a key, timestamps from t0, 1ms apart.
func genInput(prefix string, n, distinct, keylessEvery int, t0 time.Time) *input {
	in := &input{distinct: map[string]bool{}}
	for i := range n {
		r := &kgo.Record{Topic: inTopic, Timestamp: t0.Add(time.Duration(i) * time.Millisecond)}
		if keylessEvery > 0 && i%keylessEvery == keylessEvery-1 {
			r.Value = fmt.Appendf(nil, "keyless %d", i)
			in.keyless++
		} else {
			k := fmt.Sprintf("%s%05d", prefix, (i*7919)%distinct)
			r.Key = []byte(k)
			r.Value = fmt.Appendf(nil, "%s #%d", k, i)
			in.distinct[k] = true
		}
		in.recs = append(in.recs, r)
	}
	return in
}

// produce writes recs to the cluster (partitioned by key hash).
func produce(t *testing.T, addrs []string, recs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readCommitted returns a client reading topic from the start with
// read_committed; the caller closes it.
func readCommitted(t *testing.T, addrs []string, topic string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// readAll reads topic with read_committed from the start until a poll of
// idle brings nothing, and counts the records by key (values for keyless).
func readAll(t *testing.T, addrs []string, topic string, idle time.Duration) (map[string]int, []*kgo.Record) {
	t.Helper()
	cl := readCommitted(t, addrs, topic)
	defer cl.Close()
	counts := map[string]int{}
	var all []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), idle)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			k := string(r.Key)
			if k == "" {
				k = string(r.Value)
			}
			counts[k]++
			all = append(all, r)
		})
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("read %s: %v", topic, err)
			}
		})
		if n == 0 {
			return counts, all
		}
	}
}

// waitDistinct waits until the output holds want distinct keys.
func waitDistinct(t *testing.T, addrs []string, want int) {
	t.Helper()
	cl := readCommitted(t, addrs, outTopic)
	defer cl.Close()
	seen := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for len(seen) < want {
		if time.Now().After(deadline) {
			t.Fatalf("output holds %d distinct keys after 90s, want %d", len(seen), want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
	}
}

// waitCommitted waits until group has committed every input partition's
// end offset: all the input is processed.
func waitCommitted(t *testing.T, addrs []string, group string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ends, err1 := adm.ListEndOffsets(ctx, inTopic)
		offs, err2 := adm.FetchOffsets(ctx, group)
		cancel()
		behind := -1
		if err1 == nil && err2 == nil {
			behind = 0
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := offs.Lookup(inTopic, o.Partition)
				if o.Offset > 0 && (!ok || c.At < o.Offset) {
					behind++
				}
			})
			if behind == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s has not committed the input's end after 90s (%d partitions behind; %v %v)", group, behind, err1, err2)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkExactlyOnce reads the output topics and checks that out holds every
// distinct key exactly once and nothing else, that rejects holds the
// keyless records, and that dups holds the rest.
func checkExactlyOnce(t *testing.T, addrs []string, ins ...*input) {
	t.Helper()
	distinct := map[string]bool{}
	total, keyless := 0, 0
	for _, in := range ins {
		for k := range in.distinct {
			distinct[k] = true
		}
		total += len(in.recs)
		keyless += in.keyless
	}
	out, _ := readAll(t, addrs, outTopic, time.Second)
	bad := 0
	for k, n := range out {
		if !distinct[k] || n != 1 {
			if bad < 10 {
				t.Errorf("output holds key %q %d times (in the input: %v)", k, n, distinct[k])
			}
			bad++
		}
	}
	for k := range distinct {
		if out[k] == 0 {
			if bad < 10 {
				t.Errorf("output misses key %q", k)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d keys wrong in the output (%d distinct in the input, %d keys in the output)", bad, len(distinct), len(out))
	}
	rej, _ := readAll(t, addrs, rejectsTopic, time.Second)
	if got := sum(rej); got != keyless {
		t.Errorf("rejects topic holds %d records, want %d", got, keyless)
	}
	dups, _ := readAll(t, addrs, dupsTopic, time.Second)
	if got, want := sum(dups), total-keyless-len(distinct); got != want {
		t.Errorf("dups topic holds %d records, want %d", got, want)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
