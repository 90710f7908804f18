package kafka

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// defaultMaxMessageBytes is the write limit assumed for a topic whose
// max.message.bytes cannot be read (it does not exist yet, or the
// brokers refuse DescribeConfigs): franz-go's default batch limit, below
// Kafka's default of 1,048,588 bytes.
const defaultMaxMessageBytes = 1000012

// recordOverhead bounds what a record batch holding one record adds to
// the record's key, value and headers on the wire: the batch header (61
// bytes), the record's own length, attributes, timestamp and offset
// deltas, and the key, value and header-count lengths, with room to
// spare; headerOverhead bounds the two lengths of each header.
const (
	recordOverhead = 128
	headerOverhead = 10
)

// wireSize bounds the bytes r takes in a batch of its own.
func wireSize(r *kgo.Record) int {
	n := recordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// readLimits sets c.limits to the max.message.bytes of each topic the
// consumer writes, as the brokers report it (the topic's own setting, or
// the brokers' message.max.bytes it inherits). A topic whose limit cannot
// be read gets defaultMaxMessageBytes.
func (c *Consumer) readLimits(ctx context.Context) {
	topics := c.writtenTopics()
	limits := make(map[string]int32, len(topics))
	for _, t := range topics {
		limits[t] = defaultMaxMessageBytes
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rcs, err := c.admin.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		c.logf("kafka: read max.message.bytes of %v: %v; assuming %d bytes", topics, err, defaultMaxMessageBytes)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, cfg := range rc.Configs {
			if cfg.Key != "max.message.bytes" || cfg.Value == nil {
				continue
			}
			n, err := strconv.ParseInt(*cfg.Value, 10, 32)
			if err != nil || n < 512 {
				c.logf("kafka: topic %s: max.message.bytes %q unusable; assuming %d bytes", rc.Name, *cfg.Value, defaultMaxMessageBytes)
				continue
			}
			limits[rc.Name] = int32(n)
		}
	}
	c.limits = limits
	// A record is decided only if whichever topic it goes to (the output
	// if new, the duplicates topic if not) takes it with its verdict
	// header: the same test in the first pass and in a replay, so both
	// decide alike.
	c.keepLimit = int(limits[c.cfg.OutTopic])
	if c.cfg.DupsTopic != "" {
		c.keepLimit = min(c.keepLimit, int(limits[c.cfg.DupsTopic])-headerOverhead-len(VerdictHeader)-len(verdictDuplicate))
	}
}

// writtenTopics are the topics the consumer produces to.
func (c *Consumer) writtenTopics() []string {
	ts := []string{c.cfg.OutTopic}
	for _, t := range []string{c.cfg.RejectsTopic, c.cfg.DupsTopic} {
		if t != "" {
			ts = append(ts, t)
		}
	}
	return ts
}

// batchLimit is the producer's per-topic batch limit: the topic's
// max.message.bytes.
func (c *Consumer) batchLimit(topic string) int32 {
	if n, ok := c.limits[topic]; ok {
		return n
	}
	return defaultMaxMessageBytes
}

// tooLarge says why r cannot be written where its verdict sends it, or ""
// if it can.
func (c *Consumer) tooLarge(r *kgo.Record) string {
	if n := wireSize(r); n > c.keepLimit {
		return fmt.Sprintf("record of %d bytes exceeds the %d-byte limit (max.message.bytes) of the topics it would be written to", n, c.keepLimit)
	}
	return ""
}
