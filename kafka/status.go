package kafka

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Stats counts what a [Consumer] has done since [New]; see
// [Consumer.Stats].
//
// New, Duplicates and Rejected count the records of committed
// transactions only, so that they add up to CommittedRecords: the records
// of an aborted transaction are read and decided again, and counted then.
// Records counts every attempt, those of aborted transactions included.
type Stats struct {
	// Records counts the input records processed, those of aborted
	// transactions included (replays excluded).
	Records uint64
	// CommittedRecords counts the input records of committed transactions.
	CommittedRecords uint64
	New              uint64 // records of committed transactions written to the output topic
	Duplicates       uint64 // records of committed transactions dropped (or sent to [Options.DupsTopic]) as duplicates
	Rejected         uint64 // records of committed transactions without a usable key
	Committed        uint64 // transactions committed
	Aborted          uint64 // transactions aborted
	Replayed         uint64 // records replayed into engines, output suppressed
	Sessions         uint64 // group sessions started
	Partitions       int    // partitions assigned now
}

// PartitionState describes one assigned partition; see
// [Consumer.PartitionStates].
type PartitionState struct {
	Topic     string
	Partition int32
	// Ready reports the partition's state current; until then its engine
	// is being made so: Importing while an export is imported
	// ([Options.Handover]), then by replay (Replayed counts the records fed
	// so far).
	Ready     bool
	Importing bool
	Replayed  int64
	// Lag is the records behind the last one fetched, from the fetch's
	// high watermark; -1 until a fetch brought records.
	Lag int64
	// Advice is the window advisor's estimate for the partition's engine
	// (record-time delays): see [dedup.WindowAdvice].
	Advice dedup.WindowAdvice
}

// PartitionStates returns the state of each partition assigned now,
// sorted by topic and partition. It is safe to call while [Consumer.Run]
// runs.
func (c *Consumer) PartitionStates() []PartitionState {
	c.mu.Lock()
	out := make([]PartitionState, 0, len(c.parts))
	engs := make([]*dedup.Engine, 0, len(c.parts))
	for _, pt := range c.parts {
		out = append(out, PartitionState{Topic: pt.topic, Partition: pt.part, Ready: pt.ready, Importing: pt.importing.Load(), Replayed: pt.replayed.Load(), Lag: pt.lag.Load()})
		engs = append(engs, pt.eng)
	}
	c.mu.Unlock()
	// Outside c.mu: Stats takes every shard's lock. An engine closed
	// meanwhile reports a zero advice.
	for i, e := range engs {
		if e != nil {
			out[i].Advice = e.Stats().WindowAdvice
		}
	}
	slices.SortFunc(out, func(a, b PartitionState) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return int(a.Partition - b.Partition)
	})
	return out
}

// Ready reports whether the consumer is in the group and every partition
// assigned to it is ready: it consumes all it owns. It is safe to call
// while [Consumer.Run] runs.
func (c *Consumer) Ready() bool {
	if !c.joined.Load() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pt := range c.parts {
		if !pt.ready {
			return false
		}
	}
	return true
}

// Stats returns the counters; it is safe to call while [Consumer.Run]
// runs.
func (c *Consumer) Stats() Stats {
	c.mu.Lock()
	n := len(c.parts)
	c.mu.Unlock()
	return Stats{
		Records:          c.stats.records.Load(),
		CommittedRecords: c.stats.committedRecords.Load(),
		New:              c.stats.news.Load(),
		Duplicates:       c.stats.dups.Load(),
		Rejected:         c.stats.rejected.Load(),
		Committed:        c.stats.committed.Load(),
		Aborted:          c.stats.aborted.Load(),
		Replayed:         c.stats.replayed.Load(),
		Sessions:         c.stats.sessn.Load(),
		Partitions:       n,
	}
}

// checkBrokers checks every BrokerCheckInterval, until ctx is done, that
// cl reaches a broker: the client's own retries are silent, so without
// it an unreachable broker or a failing TLS or SASL handshake would show
// nowhere. Each failed check logs its error and sets brokerErr; the first
// check after failed ones that succeeds logs that and clears it.
func (c *Consumer) checkBrokers(ctx context.Context, cl *kgo.Client) {
	t := time.NewTicker(c.cfg.BrokerCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.cfg.BrokerCheckInterval)
		err := cl.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.brokerErr.Store(&err)
			c.logf("kafka: cannot reach any broker of %s: %v (retrying)", strings.Join(c.cfg.Brokers, ","), err)
		} else if c.brokerErr.Swap(nil) != nil {
			c.logf("kafka: brokers reachable again")
		}
	}
}

// BrokerErr returns the error of the last broker check, nil if it
// reached a broker or none failed yet: while it is not nil, the consumer
// cannot reach any broker (unreachable, or a TLS or SASL handshake
// failing) and retries every [Options.BrokerCheckInterval].
func (c *Consumer) BrokerErr() error {
	if p := c.brokerErr.Load(); p != nil {
		return *p
	}
	return nil
}

// checkTopics logs the topics this consumer reads or writes that do not
// exist: without auto-creation on the brokers, every transaction writing
// to one would abort after TransactionTimeout.
func (c *Consumer) checkTopics(ctx context.Context) {
	want := []string{c.cfg.Topic, c.cfg.OutTopic}
	for _, t := range []string{c.cfg.RejectsTopic, c.cfg.DupsTopic} {
		if t != "" {
			want = append(want, t)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	td, err := c.admin.ListTopics(ctx, want...)
	if err != nil {
		c.logf("kafka: list topics: %v", err)
		return
	}
	for _, t := range want {
		if d, ok := td[t]; !ok || d.Err != nil {
			c.logf("kafka: topic %q does not exist (yet): create it, or let the brokers auto-create it", t)
		}
	}
	if d, ok := td[c.cfg.Topic]; ok && d.Err == nil {
		c.mu.Lock()
		c.inputPartitions = max(c.inputPartitions, int32(len(d.Partitions)))
		c.mu.Unlock()
	}
}
