package kafka

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics every test cluster has.
const (
	inTopic      = kafkatest.In
	outTopic     = kafkatest.Out
	rejectsTopic = kafkatest.Rejects
	dupsTopic    = kafkatest.Dups
)

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

// checkExactlyOnce checks the output topics against the inputs ins:
// out holds every distinct key exactly once and nothing else, rejects the
// keyless records, dups the rest.
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
	kafkatest.CheckExactlyOnce(t, addrs, distinct, keyless, total-keyless-len(distinct))
}
