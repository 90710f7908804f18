package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// passthrough is the baseline: the same transactional consume-produce loop
// as kafka.Consumer (GroupTransactSession, batches of up to 10000 records
// or 100ms), with every record written and no engine. It counts the
// records of committed transactions, as the dedup side does.
type passthrough struct {
	n     atomic.Uint64
	parts atomic.Int64
}

func (p *passthrough) processed() uint64 { return p.n.Load() }
func (p *passthrough) assigned() int     { return int(p.parts.Load()) }

func (p *passthrough) run(ctx context.Context, addrs []string, group, in, out string) error {
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.TransactionalID(group+"-"+strconv.FormatUint(rand.Uint64(), 16)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.BlockRebalanceOnPoll(),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			p.parts.Add(int64(count(m)))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			p.parts.Add(-int64(count(m)))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			p.parts.Add(-int64(count(m)))
		}),
	)
	if err != nil {
		return fmt.Errorf("bench: passthrough: %w", err)
	}
	defer sess.CloseAllowingRebalance()
	const maxRecords, maxTime = 10000, 100 * time.Millisecond
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := sess.PollRecords(pctx, maxRecords)
		cancel()
		if fs.NumRecords() == 0 {
			sess.AllowRebalance()
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("bench: passthrough: %w", err)
		}
		start, n := time.Now(), 0
		// Produced under a context of their own: a record canceled with
		// ctx (this member leaving) would be missing from a transaction
		// that commits its input's offsets. A failed produce aborts.
		var failed atomic.Bool
		for {
			fs.EachRecord(func(r *kgo.Record) {
				sess.Produce(context.Background(), &kgo.Record{Topic: out, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp},
					func(_ *kgo.Record, err error) {
						if err != nil {
							failed.Store(true)
						}
					})
			})
			n += fs.NumRecords()
			left := maxTime - time.Since(start)
			if n >= maxRecords || left <= 0 {
				break
			}
			pctx, cancel := context.WithTimeout(ctx, left)
			fs = sess.PollRecords(pctx, maxRecords-n)
			cancel()
			if fs.NumRecords() == 0 {
				break
			}
		}
		ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := sess.Client().Flush(ectx); err != nil {
			failed.Store(true)
		}
		committed, err := sess.End(ectx, kgo.TransactionEndTry(!failed.Load()))
		cancel()
		if err != nil {
			return fmt.Errorf("bench: passthrough end: %w", err)
		}
		if committed {
			p.n.Add(uint64(n))
		}
		sess.AllowRebalance()
	}
	return nil
}
