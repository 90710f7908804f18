package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/streamdedup/dedup/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// latencyTopics returns the input and output topics of the latency
// scenario called prefix ("lat", "reb") in one mode: each mode has its own.
func latencyTopics(prefix string, dedupOn bool) (in, out string) {
	mode := "pass"
	if dedupOn {
		mode = "dedup"
	}
	return prefix + "-in-" + mode, prefix + "-out-" + mode
}

// waitReady waits until ready has been signalled once per input
// partition, or returns the first error on errs, or ctx's.
func (k *kafkaRun) waitReady(ctx context.Context, ready <-chan struct{}, errs <-chan error) error {
	for range k.cfg.Partitions {
		select {
		case <-ready:
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// latencyClients returns a read_committed reader of out starting at from,
// and a producer lingering 1ms; the caller closes both.
func (k *kafkaRun) latencyClients(out string, from kgo.Offset) (reader, prod *kgo.Client, err error) {
	reader, err = kgo.NewClient(kgo.SeedBrokers(k.addrs...), kgo.ConsumeTopics(out),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(from),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: reader: %w", err)
	}
	prod, err = kgo.NewClient(kgo.SeedBrokers(k.addrs...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		reader.Close()
		return nil, nil, fmt.Errorf("bench: producer: %w", err)
	}
	return reader, prod, nil
}

// latency runs one member while events arrive at LatencyRate stamped with
// the time they are produced, and returns the median and p99 of the time
// from that stamp to when a read_committed reader sees the output.
func (k *kafkaRun) latency(ctx context.Context, dedupOn bool) (p50, p99 time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, 2)
	in, out := latencyTopics("lat", dedupOn)
	ready := make(chan struct{}, 64)
	onReady := func(kafka.Ready) { ready <- struct{}{} }
	k.startWorkers(ctx, &wg, errs, 1, dedupOn, in, out, onReady)
	if dedupOn {
		if err := k.waitReady(ctx, ready, errs); err != nil {
			return 0, 0, err
		}
	}
	reader, prod, err := k.latencyClients(out, kgo.NewOffset().AtEnd())
	if err != nil {
		return 0, 0, err
	}
	defer reader.Close()
	defer prod.Close()
	total := int(k.cfg.LatencyRate * k.cfg.LatencyFor.Seconds())
	key := k.groups.Add(1) << 32 // distinct keys per run
	k.produceAtRate(ctx, &wg, errs, prod, in, total, time.Now(), func(i int) []byte { return []byte(strconv.FormatInt(key+int64(i), 10)) })
	var h Histogram
	deadline := time.Now().Add(k.cfg.LatencyFor + time.Minute)
	for int(h.Count()) < total {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("bench: latency run saw %d of %d events", h.Count(), total)
		}
		select {
		case err := <-errs:
			return 0, 0, err
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := reader.PollFetches(pctx)
		pcancel()
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			h.Record(now.Sub(r.Timestamp))
			k.progress.Add(1)
		})
	}
	return h.Quantile(0.5), h.Quantile(0.99), nil
}

// produceAtRate produces total records to in beside the caller, at
// LatencyRate from start, each stamped with the time it is produced; the
// first produce error goes to errs.
func (k *kafkaRun) produceAtRate(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, prod *kgo.Client, in string, total int, start time.Time, key func(i int) []byte) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range total {
			at := start.Add(time.Duration(float64(i) / k.cfg.LatencyRate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			r := &kgo.Record{Topic: in, Key: key(i), Value: []byte("latency"), Timestamp: time.Now()}
			prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					select {
					case errs <- err:
					default:
					}
				}
			})
		}
	}()
}

// rebalanceLatency runs the KafkaRebalance scenario and returns the
// median, p99 and maximum latency of its events.
func (k *kafkaRun) rebalanceLatency(ctx context.Context, dedupOn bool) (p50, p99, top time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, 4)
	in, out := latencyTopics("reb", dedupOn)
	group := fmt.Sprintf("bench-%d", k.groups.Add(1))
	ready := make(chan struct{}, 64)
	onReady := func(kafka.Ready) {
		select {
		case ready <- struct{}{}:
		default:
		}
	}
	firstCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	if _, err := k.startWorker(firstCtx, &wg, errs, group, 0, dedupOn, in, out, onReady); err != nil {
		return 0, 0, 0, err
	}
	if dedupOn {
		if err := k.waitReady(ctx, ready, errs); err != nil {
			return 0, 0, 0, err
		}
	}
	reader, prod, err := k.latencyClients(out, kgo.NewOffset().AtStart())
	if err != nil {
		return 0, 0, 0, err
	}
	defer reader.Close()
	defer prod.Close()
	span := 3 * k.cfg.LatencyFor
	total := int(k.cfg.LatencyRate * span.Seconds())
	start := time.Now()
	k.produceAtRate(ctx, &wg, errs, prod, in, total, start, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	// The second member joins after a third of the span, the first leaves
	// after two thirds.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(span / 3))):
		}
		if _, err := k.startWorker(ctx, &wg, errs, group, 1, dedupOn, in, out, onReady); err != nil {
			errs <- err
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(2 * span / 3))):
		}
		stopFirst()
	}()
	var h Histogram
	seen := make([]bool, total)
	n := 0
	deadline := start.Add(span + time.Minute)
	for n < total {
		if time.Now().After(deadline) {
			var missing []int
			for i, ok := range seen {
				if !ok && len(missing) < 5 {
					missing = append(missing, i)
				}
			}
			return 0, 0, 0, fmt.Errorf("bench: rebalance latency run (dedup %v) saw %d of %d events; missing keys include %v", dedupOn, n, total, missing)
		}
		select {
		case err := <-errs:
			return 0, 0, 0, err
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := reader.PollFetches(pctx)
		pcancel()
		now := time.Now()
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			i, err := strconv.Atoi(string(r.Key))
			if err != nil || i < 0 || i >= total || seen[i] {
				bad = fmt.Errorf("bench: rebalance latency run: output key %q unknown or seen twice", r.Key)
				return
			}
			seen[i] = true
			n++
			d := now.Sub(r.Timestamp)
			top = max(top, d)
			h.Record(d)
			k.progress.Add(1)
		})
		if bad != nil {
			return 0, 0, 0, bad
		}
	}
	return h.Quantile(0.5), h.Quantile(0.99), top, nil
}
