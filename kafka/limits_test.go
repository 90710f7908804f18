package kafka

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRecordTooLargeNeverBlocks feeds a partition records around the
// output's max.message.bytes (kfake's and Kafka's default, 1,048,588 bytes;
// the input takes 3 MB): one of 1.02 MB, which the output takes, is
// written (the producer's batch limit follows the topic's, not franz-go's
// 1,000,012 bytes); one of 1.5 MB goes to the rejects topic with its
// reason and without its value; a record behind each is written too, and
// no transaction aborts. Without a rejects topic the large record is
// dropped and counted.
func TestRecordTooLargeNeverBlocks(t *testing.T) {
	for _, rejects := range []bool{true, false} {
		name := "rejects-topic"
		if !rejects {
			name = "no-rejects-topic"
		}
		t.Run(name, func(t *testing.T) {
			c := kafkatest.NewCluster(t, 1)
			addrs := c.ListenAddrs()
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ProducerBatchMaxBytes(4<<20))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			big := "3000000"
			ctx := context.Background()
			if _, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &big}}, inTopic); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			recs := []*kgo.Record{
				{Topic: inTopic, Key: []byte("k1"), Value: []byte("small"), Timestamp: now},
				{Topic: inTopic, Key: []byte("k2"), Value: bytes.Repeat([]byte("x"), 1020000), Timestamp: now},
				{Topic: inTopic, Key: []byte("k3"), Value: []byte("small"), Timestamp: now},
				{Topic: inTopic, Key: []byte("k4"), Value: bytes.Repeat([]byte("y"), 1500000), Timestamp: now},
				{Topic: inTopic, Key: []byte("k5"), Value: []byte("small"), Timestamp: now},
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, addrs, "g-large")
			if !rejects {
				cfg.RejectsTopic = ""
			}
			r := start(t, cfg, nil)
			kafkatest.WaitCommitted(t, addrs, cfg.Group, nil)
			r.stop(t)
			out, outRecs := kafkatest.ReadAll(t, addrs, outTopic, time.Second)
			for _, k := range []string{"k1", "k2", "k3", "k5"} {
				if out[k] != 1 {
					t.Errorf("output holds %s %d times, want 1: %v", k, out[k], out)
				}
			}
			if out["k4"] != 0 {
				t.Errorf("output holds the 1.5 MB record k4")
			}
			for _, rec := range outRecs {
				if string(rec.Key) == "k2" && len(rec.Value) != 1020000 {
					t.Errorf("k2 written with %d bytes of value", len(rec.Value))
				}
			}
			st := r.c.Stats()
			if st.Aborted != 0 || st.Rejected != 1 || st.New != 4 {
				t.Errorf("stats %+v: want 0 aborted, 1 rejected, 4 new", st)
			}
			_, rej := kafkatest.ReadAll(t, addrs, rejectsTopic, 500*time.Millisecond)
			if !rejects {
				if len(rej) != 0 {
					t.Errorf("rejects topic holds %d records without --rejects-topic", len(rej))
				}
				return
			}
			if len(rej) != 1 || string(rej[0].Key) != "k4" || len(rej[0].Value) != 0 {
				t.Fatalf("rejects: %d records, want k4 without its value", len(rej))
			}
			var reason string
			for _, h := range rej[0].Headers {
				if h.Key == RejectReasonHeader {
					reason = string(h.Value)
				}
			}
			for _, want := range []string{"record too large", "max.message.bytes", "value of 1500000 bytes dropped"} {
				if !strings.Contains(reason, want) {
					t.Errorf("reject reason %q does not say %q", reason, want)
				}
			}
		})
	}
}
