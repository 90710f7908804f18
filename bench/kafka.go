package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/cputime"
	"github.com/streamdedup/dedup/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaConfig configures the Kafka scenario: dedup consumers against a
// plain transactional consume-produce passthrough on the same in-process
// broker (kfake), in the same run.
type KafkaConfig struct {
	// Events is the input of each throughput run. Default 500000.
	Events int
	// Partitions of the input topic. Default 4.
	Partitions int32
	// Instances are the group sizes measured. Default 1, 2, 3.
	Instances []int
	// DuplicateFraction of the input. Default 0.2.
	DuplicateFraction float64
	// LatencyRate is the input rate of the end-to-end latency runs, events
	// per second. Default 5000.
	LatencyRate float64
	// LatencyFor is how long each latency run produces. Default 5s.
	LatencyFor time.Duration
	// Repeat is how many times each throughput run is made; the median is
	// reported. Default 3.
	Repeat int
	// Probabilistic runs the engines without exact stores.
	Probabilistic bool
	// Dir holds the engines' states; "" makes a temporary directory.
	Dir string
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *KafkaConfig) EnsureDefaults() {
	if c.Events == 0 {
		c.Events = 500000
	}
	if c.Partitions == 0 {
		c.Partitions = 4
	}
	if len(c.Instances) == 0 {
		c.Instances = []int{1, 2, 3}
	}
	if c.DuplicateFraction == 0 {
		c.DuplicateFraction = 0.2
	}
	if c.LatencyRate == 0 {
		c.LatencyRate = 5000
	}
	if c.LatencyFor == 0 {
		c.LatencyFor = 5 * time.Second
	}
	if c.Repeat == 0 {
		c.Repeat = 3
	}
}

// KafkaRow is one group size: events per second through the passthrough
// and through dedup, and their ratio (dedup's overhead).
type KafkaRow struct {
	Instances   int     `json:"instances"`
	Passthrough float64 `json:"passthrough_events_per_sec"`
	Dedup       float64 `json:"dedup_events_per_sec"`
	Ratio       float64 `json:"ratio"`
	// PassthroughCPU and DedupCPU are the process's CPU microseconds per
	// event (broker included), and CPURatio passthrough/dedup: the
	// overhead as capacity, steadier than wall-clock rates on a loaded
	// machine.
	PassthroughCPU float64 `json:"passthrough_cpu_us_per_event"`
	DedupCPU       float64 `json:"dedup_cpu_us_per_event"`
	CPURatio       float64 `json:"cpu_ratio"`
	// Produce is the slower of the two runs' input producers, for scale
	// (the input is produced before it is consumed).
	Produce float64 `json:"produce_events_per_sec"`
}

// KafkaMove is a partition move: a second instance with no state joins,
// takes half the partitions and rebuilds them by replay.
type KafkaMove struct {
	Moved      int           `json:"partitions_moved"`
	Replayed   int64         `json:"records_replayed"`
	Ready      time.Duration `json:"time_to_ready_ns"`       // the slowest moved partition
	ReplayRate float64       `json:"replay_records_per_sec"` // all moved partitions together, over the slowest's time
	// PerPartition is the replay rate of one partition (records over its
	// own time, averaged).
	PerPartition float64 `json:"replay_records_per_sec_per_partition"`
	IngestRate   float64 `json:"ingest_events_per_sec"` // one instance, from the throughput run
	Ratio        float64 `json:"replay_over_ingest"`
}

// KafkaResult is the scenario's outcome.
type KafkaResult struct {
	Config         KafkaConfig   `json:"config"`
	Rows           []KafkaRow    `json:"rows"`
	P50Passthrough time.Duration `json:"p50_passthrough_ns"`
	P99Passthrough time.Duration `json:"p99_passthrough_ns"`
	P50Dedup       time.Duration `json:"p50_dedup_ns"`
	P99Dedup       time.Duration `json:"p99_dedup_ns"`
	// Rebalance is the end-to-end latency while a second instance joins
	// the group and the first one leaves.
	Rebalance KafkaRebalance `json:"rebalance"`
	Move      KafkaMove      `json:"move"`
}

// KafkaRebalance is the end-to-end latency through rebalances: events
// arrive at LatencyRate for three times LatencyFor; one instance runs
// from the start, a second joins after a third of the time, and the first
// leaves after two thirds, so that every partition moves once or twice.
// Latency is the time from an input record's timestamp (its produce time)
// to when a read_committed reader receives its output record.
type KafkaRebalance struct {
	P50Passthrough time.Duration `json:"p50_passthrough_ns"`
	P99Passthrough time.Duration `json:"p99_passthrough_ns"`
	MaxPassthrough time.Duration `json:"max_passthrough_ns"`
	P50Dedup       time.Duration `json:"p50_dedup_ns"`
	P99Dedup       time.Duration `json:"p99_dedup_ns"`
	MaxDedup       time.Duration `json:"max_dedup_ns"`
}

// Kafka runs the scenario.
func Kafka(ctx context.Context, cfg KafkaConfig, progress Progress) (*KafkaResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.EnsureDefaults()
	progress = orNop(progress)
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "dedupbench-kafka-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	topics := []string{"in", "move-out", "lat-in-pass", "lat-in-dedup", "lat-out-pass", "lat-out-dedup",
		"reb-in-pass", "reb-in-dedup", "reb-out-pass", "reb-out-dedup"}
	for _, n := range cfg.Instances {
		for _, m := range []string{"pass", "dedup"} {
			for r := range cfg.Repeat {
				topics = append(topics, fmt.Sprintf("in-%s-%d-%d", m, n, r), fmt.Sprintf("out-%s-%d-%d", m, n, r))
			}
		}
	}
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.Partitions, topics...))
	if err != nil {
		return nil, fmt.Errorf("bench: kfake: %w", err)
	}
	defer cl.Close()
	k := &kafkaRun{cfg: cfg, cluster: cl, addrs: cl.ListenAddrs(), dir: dir, progress: progress}

	progress.Stage("kafka: produce input", int64(cfg.Events))
	if _, err := k.produceInput(ctx, "in", cfg.Events, time.Now()); err != nil {
		return nil, err
	}
	res := &KafkaResult{Config: cfg}
	for _, n := range cfg.Instances {
		var row KafkaRow
		row.Instances = n
		var pass, dd, passCPU, ddCPU, prod []float64
		for r := range cfg.Repeat {
			progress.Stage(fmt.Sprintf("kafka: passthrough x%d (%d/%d)", n, r+1, cfg.Repeat), int64(cfg.Events))
			p, pc, pr, err := k.throughput(ctx, n, false, r)
			if err != nil {
				return nil, err
			}
			progress.Stage(fmt.Sprintf("kafka: dedup x%d (%d/%d)", n, r+1, cfg.Repeat), int64(cfg.Events))
			d, dc, pr2, err := k.throughput(ctx, n, true, r)
			if err != nil {
				return nil, err
			}
			pass, dd, prod = append(pass, p), append(dd, d), append(prod, pr, pr2)
			passCPU, ddCPU = append(passCPU, pc), append(ddCPU, dc)
		}
		row.Passthrough, row.Dedup, row.Produce = median(pass), median(dd), median(prod)
		row.PassthroughCPU, row.DedupCPU = median(passCPU)*1e6, median(ddCPU)*1e6
		if row.DedupCPU > 0 {
			row.CPURatio = row.PassthroughCPU / row.DedupCPU
		}
		if row.Passthrough > 0 {
			row.Ratio = row.Dedup / row.Passthrough
		}
		res.Rows = append(res.Rows, row)
	}
	lat := int64(cfg.LatencyRate * cfg.LatencyFor.Seconds())
	progress.Stage("kafka: latency, passthrough", lat)
	if res.P50Passthrough, res.P99Passthrough, err = k.latency(ctx, false); err != nil {
		return nil, err
	}
	progress.Stage("kafka: latency, dedup", lat)
	if res.P50Dedup, res.P99Dedup, err = k.latency(ctx, true); err != nil {
		return nil, err
	}
	rb := &res.Rebalance
	progress.Stage("kafka: latency through rebalances, passthrough", 3*lat)
	if rb.P50Passthrough, rb.P99Passthrough, rb.MaxPassthrough, err = k.rebalanceLatency(ctx, false); err != nil {
		return nil, err
	}
	progress.Stage("kafka: latency through rebalances, dedup", 3*lat)
	if rb.P50Dedup, rb.P99Dedup, rb.MaxDedup, err = k.rebalanceLatency(ctx, true); err != nil {
		return nil, err
	}
	progress.Stage("kafka: partition move", int64(cfg.Events))
	if res.Move, err = k.move(ctx); err != nil {
		return nil, err
	}
	if len(res.Rows) > 0 && res.Rows[0].Instances == 1 {
		res.Move.IngestRate = res.Rows[0].Dedup
		if res.Move.IngestRate > 0 {
			res.Move.Ratio = res.Move.ReplayRate / res.Move.IngestRate
		}
	}
	return res, nil
}

type kafkaRun struct {
	cfg      KafkaConfig
	cluster  *kfake.Cluster
	addrs    []string
	dir      string
	progress Progress
	groups   atomic.Int64
	produced atomic.Int64
}

// produceInput writes n keyed events to topic, DuplicateFraction of them
// repeats of earlier keys, timestamps from t0 a microsecond apart, from
// four producers at once, and returns their rate.
func (k *kafkaRun) produceInput(ctx context.Context, topic string, n int, t0 time.Time) (float64, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	distinct := 0
	recs := make([]*kgo.Record, 0, n)
	for j := range n {
		key := distinct
		if distinct > 0 && rng.Float64() < k.cfg.DuplicateFraction {
			key = rng.IntN(distinct)
		} else {
			distinct++
		}
		recs = append(recs, &kgo.Record{
			Topic:     topic,
			Key:       fmt.Appendf(nil, "key-%010d", key),
			Value:     []byte(`{"event":"bench","payload":"0123456789abcdef0123456789abcdef"}`),
			Timestamp: t0.Add(time.Duration(j) * time.Microsecond),
		})
	}
	const producers, chunk = 4, 5000
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(k.addrs...), kgo.ProducerLinger(2*time.Millisecond))
			if err != nil {
				errs <- fmt.Errorf("bench: producer: %w", err)
				return
			}
			defer cl.Close()
			// Producer p writes the chunks p, p+producers, ...: each
			// partition still gets one key's records in order.
			for i := p * chunk; i < n; i += producers * chunk {
				part := recs[i:min(n, i+chunk)]
				if err := cl.ProduceSync(ctx, part...).FirstErr(); err != nil {
					errs <- fmt.Errorf("bench: produce input: %w", err)
					return
				}
				k.produced.Add(int64(len(part)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// worker is one group member of a run, dedup or passthrough.
type worker interface {
	processed() uint64 // input records of committed transactions
	assigned() int     // partitions assigned now
}

type dedupWorker struct{ c *kafka.Consumer }

func (w dedupWorker) processed() uint64 { return w.c.Stats().CommittedRecords }
func (w dedupWorker) assigned() int     { return w.c.Stats().Partitions }

// startWorkers starts n members of a new group reading in and writing out.
func (k *kafkaRun) startWorkers(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, n int, dedupOn bool, in, out string, onReady func(kafka.Ready)) []worker {
	group := fmt.Sprintf("bench-%d", k.groups.Add(1))
	var ws []worker
	for i := range n {
		w, err := k.startWorker(ctx, wg, errs, group, i, dedupOn, in, out, onReady)
		if err != nil {
			errs <- err
			return ws
		}
		ws = append(ws, w)
	}
	return ws
}

// startWorker starts member i of group; it runs until ctx is done.
func (k *kafkaRun) startWorker(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, group string, i int, dedupOn bool, in, out string, onReady func(kafka.Ready)) (worker, error) {
	if dedupOn {
		c, err := k.startConsumer(ctx, wg, errs, group, i, in, out, onReady)
		if err != nil {
			return nil, err
		}
		return dedupWorker{c}, nil
	}
	p := &passthrough{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := p.run(ctx, k.addrs, group, in, out); err != nil && ctx.Err() == nil {
			errs <- err
		}
	}()
	return p, nil
}

// startConsumer starts dedup member i of group, its state in its own
// directory; it runs until ctx is done, and sends Run's error to errs.
func (k *kafkaRun) startConsumer(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, group string, i int, in, out string, onReady func(kafka.Ready)) (*kafka.Consumer, error) {
	c, err := kafka.New(k.consumerConfig(group, in, out, filepath.Join(k.dir, group, strconv.Itoa(i)), onReady))
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil {
			errs <- err
		}
	}()
	return c, nil
}

func (k *kafkaRun) consumerConfig(group, in, out, dir string, onReady func(kafka.Ready)) kafka.Options {
	return kafka.Options{
		Brokers:          k.addrs,
		Group:            group,
		Topic:            in,
		OutTopic:         out,
		StateDir:         dir,
		Engine:           dedup.Options{Probabilistic: k.cfg.Probabilistic, ExpectedRate: 50000},
		SessionTimeout:   10 * time.Second,
		RebalanceTimeout: 10 * time.Second,
		OnReady:          onReady,
		ClientOpts:       []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond), kgo.HeartbeatInterval(100 * time.Millisecond)},
	}
}

func sumProcessed(ws []worker) uint64 {
	var n uint64
	for _, w := range ws {
		n += w.processed()
	}
	return n
}

// throughput produces the input, starts n members that cannot fetch it
// until every partition is assigned and the assignment has held for a
// second, then returns the events per second committed between 10% and
// 90% of it, the process's CPU seconds per event meanwhile (broker
// included: everything runs in this process), and the producers' rate.
func (k *kafkaRun) throughput(ctx context.Context, n int, dedupOn bool, rep int) (rate, cpuPerEvent, produceRate float64, err error) {
	mode := "pass"
	if dedupOn {
		mode = "dedup"
	}
	in, out := fmt.Sprintf("in-%s-%d-%d", mode, n, rep), fmt.Sprintf("out-%s-%d-%d", mode, n, rep)
	// kfake holds every record in memory: drop the run's topics after it.
	defer k.deleteTopics(in, out)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, n+1)
	// The input is there before the members start, and they cannot fetch
	// it (kfake answers their fetches NOT_LEADER) until the group has
	// settled: what is measured is consumption, not joins and rebalances.
	if produceRate, err = k.produceInput(ctx, in, k.cfg.Events, time.Now()); err != nil {
		return 0, 0, 0, err
	}
	gate := k.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: in, Err: kerr.NotLeaderForPartition, Count: -1})
	ws := k.startWorkers(ctx, &wg, errs, n, dedupOn, in, out, nil)
	err = k.waitStable(ctx, ws, errs)
	gate.Remove()
	if err != nil {
		return 0, 0, 0, err
	}
	total := uint64(k.cfg.Events)
	lo, hi := total/10, total*9/10
	var t1, t2 time.Time
	var n1, n2, last uint64
	var cpu1, cpu2 time.Duration
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Minute)
	for t2.IsZero() {
		select {
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		case err := <-errs:
			return 0, 0, 0, err
		case <-tick.C:
		}
		now, done := time.Now(), sumProcessed(ws)
		k.progress.Add(int64(done - last))
		last = done
		if t1.IsZero() && done >= lo {
			t1, n1, cpu1 = now, done, cputime.Process()
		}
		if !t1.IsZero() && done >= hi {
			t2, n2, cpu2 = now, done, cputime.Process()
		}
		if now.After(deadline) {
			return 0, 0, 0, fmt.Errorf("bench: %s x%d committed %d of %d events in 10 minutes", mode, n, done, total)
		}
	}
	return float64(n2-n1) / t2.Sub(t1).Seconds(), (cpu2 - cpu1).Seconds() / float64(n2-n1), produceRate, nil
}

// waitStable waits until the members hold every partition, each at least
// one (when there are enough), unchanged for a second.
func (k *kafkaRun) waitStable(ctx context.Context, ws []worker, errs <-chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	var since time.Time
	for {
		sum, ok := 0, true
		for _, w := range ws {
			a := w.assigned()
			sum += a
			if a == 0 && len(ws) <= int(k.cfg.Partitions) {
				ok = false
			}
		}
		switch {
		case !ok || sum != int(k.cfg.Partitions):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= time.Second:
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: group of %d did not settle in 2 minutes", len(ws))
		}
		if err := pause(ctx, errs); err != nil {
			return err
		}
	}
}

// pause waits 20ms, or returns why the run must stop: ctx's error or the
// first on errs.
func pause(ctx context.Context, errs <-chan error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-errs:
		return err
	case <-time.After(20 * time.Millisecond):
		return nil
	}
}

// deleteTopics deletes topics, once the run's members have stopped.
func (k *kafkaRun) deleteTopics(topics ...string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.addrs...))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = kadm.NewClient(cl).DeleteTopics(ctx, topics...)
}

// errKafkaBench is returned for a bad KafkaConfig.
var errKafkaBench = errors.New("bench: invalid kafka config")

// Validate reports a bad KafkaConfig field by name.
func (c *KafkaConfig) Validate() error {
	var errs []error
	if c.Events < 0 {
		errs = append(errs, fmt.Errorf("%w: Events must not be negative, got %d", errKafkaBench, c.Events))
	}
	if c.Partitions < 0 {
		errs = append(errs, fmt.Errorf("%w: Partitions must not be negative, got %d", errKafkaBench, c.Partitions))
	}
	for _, n := range c.Instances {
		if n < 1 {
			errs = append(errs, fmt.Errorf("%w: Instances must be at least 1, got %d", errKafkaBench, n))
		}
	}
	if c.DuplicateFraction < 0 || c.DuplicateFraction >= 1 {
		errs = append(errs, fmt.Errorf("%w: DuplicateFraction must be in [0, 1), got %v", errKafkaBench, c.DuplicateFraction))
	}
	if c.Repeat < 0 {
		errs = append(errs, fmt.Errorf("%w: Repeat must not be negative, got %d", errKafkaBench, c.Repeat))
	}
	if c.LatencyRate < 0 || c.LatencyFor < 0 {
		errs = append(errs, fmt.Errorf("%w: LatencyRate and LatencyFor must not be negative", errKafkaBench))
	}
	return errors.Join(errs...)
}
