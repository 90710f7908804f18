package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/twmb/franz-go/pkg/kgo"
)

// process decides recs, in order, with the engine of pt. With emit, the
// distinct records go to the output topic (and duplicates and rejects to
// theirs) in the open transaction; without it (replay) nothing is written.
func (c *Consumer) process(pt *partition, recs []*kgo.Record, emit bool) error {
	// The scratch slices belong to the poll loop; a replay runs in a
	// callback beside it and allocates its own.
	var keys [][]byte
	var batch []*kgo.Record
	var scratch []dedup.Verdict
	if emit {
		keys, batch, scratch = c.keys[:0], c.recs[:0], c.verdicts
	}
	var lo int64
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		pt.clock.Store(lo)
		verdicts := slices.Grow(scratch[:0], len(keys))[:len(keys)]
		if err := pt.eng.ObserveBatchAt(keys, time.UnixMilli(max(lo, 0)), verdicts); err != nil {
			return fmt.Errorf("kafka: observe %s: %w", pt.tp, err)
		}
		if emit {
			news := len(pt.news)
			for i, v := range verdicts {
				r := batch[i]
				if v == dedup.New {
					pt.news = append(pt.news, keys[i])
					c.produce(&kgo.Record{Topic: c.cfg.OutTopic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp})
				} else if c.cfg.DupsTopic != "" {
					h := append(slices.Clip(r.Headers), kgo.RecordHeader{Key: VerdictHeader, Value: verdictValue(v)})
					c.produce(&kgo.Record{Topic: c.cfg.DupsTopic, Key: r.Key, Value: r.Value, Headers: h, Timestamp: r.Timestamp})
				}
			}
			news = len(pt.news) - news
			c.txnNews += uint64(news)
			c.txnDups += uint64(len(verdicts) - news)
		}
		scratch = verdicts
		keys, batch = keys[:0], batch[:0]
		return nil
	}
	for _, r := range recs {
		k, err := c.cfg.Key(r)
		if why := c.tooLarge(r); why != "" {
			err = fmt.Errorf("%w: %s", ErrTooLarge, why)
		}
		if err == nil && len(k) > c.engine.MaxKeySize {
			err = fmt.Errorf("%w: key of %d bytes exceeds the limit of %d", ErrNoKey, len(k), c.engine.MaxKeySize)
		}
		if err == nil && len(k) == 0 {
			err = fmt.Errorf("%w: empty key", ErrNoKey)
		}
		if err != nil {
			if emit {
				c.reject(r, err)
			}
			continue
		}
		ms := r.Timestamp.UnixMilli()
		if len(keys) > 0 && (ms < lo || ms >= lo+c.tickMs) {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(keys) == 0 {
			lo = ms
		}
		keys = append(keys, k)
		batch = append(batch, r)
	}
	if err := flush(); err != nil {
		return err
	}
	if emit {
		c.keys, c.recs, c.verdicts = keys[:0], batch[:0], scratch
		c.stats.records.Add(uint64(len(recs)))
	}
	last := recs[len(recs)-1]
	pt.next = last.Offset + 1
	pt.lastMs = max(pt.lastMs, last.Timestamp.UnixMilli())
	return nil
}

// The values of VerdictHeader, shared by every record sent to DupsTopic
// (the client only reads them).
var (
	verdictInFlight  = []byte("inflight")
	verdictDuplicate = []byte("duplicate")
)

func verdictValue(v dedup.Verdict) []byte {
	if v == dedup.InFlight {
		return verdictInFlight
	}
	return verdictDuplicate
}

// reject sends r to the rejects topic, or drops it, counting it in the
// open transaction.
// A record too large for the rejects topic goes there without its value
// (and without its key and headers if they are still too large), the
// reason saying so.
func (c *Consumer) reject(r *kgo.Record, why error) {
	c.txnRejected++
	if c.cfg.RejectsTopic == "" {
		return
	}
	limit := int(c.batchLimit(c.cfg.RejectsTopic))
	reason := why.Error()
	rr := &kgo.Record{Topic: c.cfg.RejectsTopic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
	fits := func() bool {
		return wireSize(rr)+headerOverhead+len(RejectReasonHeader)+len(reason) <= limit
	}
	if !fits() {
		reason += fmt.Sprintf("; value of %d bytes dropped (the rejects topic takes %d)", len(r.Value), limit)
		rr.Value = nil
	}
	if !fits() {
		reason += "; key and headers dropped"
		rr.Key, rr.Headers = nil, nil
	}
	rr.Headers = append(slices.Clip(rr.Headers), kgo.RecordHeader{Key: RejectReasonHeader, Value: []byte(reason)})
	c.produce(rr)
}

// produce writes r in the open transaction; a failure aborts it at end.
func (c *Consumer) produce(r *kgo.Record) {
	c.sess.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
		if err != nil {
			c.produceErr.CompareAndSwap(nil, &err)
		}
	})
}
