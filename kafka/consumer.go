package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/handover"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Consumer is a deduplicating consumer-group member; see the package doc.
// Create it with [New], run it with [Consumer.Run], and read its counters
// with [Consumer.Stats], from any goroutine.
type Consumer struct {
	cfg    Options
	engine dedup.Options // cfg.Engine with its defaults
	tickMs int64         // the span of one observation run, in ms
	// lookback is how far before ts(C) a rebuild replays: the longest a key
	// can be remembered, Window + Window/Generations.
	lookback time.Duration

	// Shutdown deadlines, set by Run: endCtx is canceled half of
	// ShutdownTimeout after Run's context is done (the open transaction
	// must have ended by then), closeCtx at three quarters (the group
	// client must have closed), hardCtx at the whole (the static member
	// must have left).
	endCtx, closeCtx, hardCtx context.Context

	mu    sync.Mutex
	parts map[tp]*partition
	// roundMu serialises the loop's work between AllowRebalance and its
	// next poll (commit rounds, exports) with the group's callbacks, which
	// may run in that gap, and with the close at the session's end.
	roundMu sync.Mutex
	// inputPartitions is the input's partition count last seen: a partition
	// assigned beyond it was added to the input (see warnGrown).
	inputPartitions int32
	fatal           error // a permanent error found in a callback: Run returns it

	// Per-session handles, set by session before the group is joined.
	admin   *kadm.Client
	adminCl *kgo.Client // admin's client
	sess    *kgo.GroupTransactSession

	// rebalanced is set when partitions were revoked or lost: franz-go's
	// session then aborts the next transaction it ends, so the loop
	// clears that with an empty End before beginning one (see
	// clearRebalance).
	rebalanced atomic.Bool
	// joined is set while the session has joined the group (its first
	// assignment came), for Ready.
	joined atomic.Bool
	// brokerErr is the error of the last broker check (checkBrokers),
	// nil when it reached one.
	brokerErr atomic.Pointer[error]

	// The max.message.bytes of each topic written, read at the start of
	// each session (readLimits), and the largest record the output and
	// duplicates topics both take.
	limits    map[string]int32
	keepLimit int

	// The open transaction; only the poll loop touches these.
	staged     []*partition
	produceErr atomic.Pointer[error]
	txnRecords int // input records in the open transaction
	// The verdicts of the open transaction's records, added to the stats
	// when it commits: an aborted transaction's records are decided again.
	txnNews, txnDups, txnRejected uint64

	// The engines' commits after the last transaction, running beside the
	// loop.
	commits   sync.WaitGroup
	commitErr atomic.Pointer[error]
	dirty     []*partition // partitions with keys to commit
	lastRound time.Time    // when the last commit round started
	inFlight  int          // the most keys a dirty partition holds
	keys      [][]byte
	recs      []*kgo.Record
	verdicts  []dedup.Verdict

	// testHook, set by tests, is called at the crash points "before-end"
	// (records staged, transaction open) and "after-end" (transaction
	// committed, engines not yet); an error ends the session there, as a
	// crash would.
	testHook func(point string) error

	// Handover (Options.Handover): the next time the loop looks for a
	// partition due for export, the uploads running beside the loop, and
	// the context that ends them when Run returns.
	nextExportScan time.Time
	exports        sync.WaitGroup
	exportCtx      context.Context
	handover       handoverCounters

	stats struct {
		records, news, dups, rejected       atomic.Uint64
		committed, aborted, replayed, sessn atomic.Uint64
		committedRecords                    atomic.Uint64
	}
}

// tp names a topic-partition.
type tp struct {
	topic string
	part  int32
}

func (t tp) String() string { return t.topic + "-" + strconv.Itoa(int(t.part)) }

// partition is one assigned input partition and its engine.
type partition struct {
	tp
	eng   *dedup.Engine
	clock atomic.Int64 // the engine's clock: a record timestamp, Unix ms
	ready bool         // its state is current (set under Consumer.mu)

	// For PartitionStates: records replayed into the engine, and the
	// records behind the last one fetched (the high watermark minus the
	// offset after it; -1 until a fetch says).
	replayed atomic.Int64
	lag      atomic.Int64

	// Handover: importing is set while an export is imported; exported
	// is the offset of the last export written or imported (-1 for
	// none); uploading is set while a periodic export uploads; lastExport
	// (under Consumer.mu) is when the last periodic export was taken.
	importing  atomic.Bool
	exported   atomic.Int64
	uploading  atomic.Bool
	lastExport time.Time
	hasher     handover.Hasher

	// Staged in the open transaction (poll loop only).
	news   [][]byte // keys observed New, released with Forget on abort
	next   int64    // the offset after the last staged record; -1 if none is staged
	lastMs int64    // the latest record timestamp seen

	// Committed transactions whose keys the engine has not committed yet
	// (poll loop and gated callbacks only).
	dirty       bool
	barrier     dedup.Barrier // marks those keys
	pendingCP   []byte        // the checkpoint that goes with them
	pendingKeys int           // how many they are
}

// New fills cfg's zero fields with their defaults, validates it and
// returns a [Consumer]; [Consumer.Run] starts it. The errors wrap
// [ErrInvalidOptions], one for each bad field.
func New(cfg Options) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	eo := cfg.Engine
	eo.WithDefaults()
	tick := min(100*time.Millisecond, eo.Window/1000)
	return &Consumer{
		cfg:      cfg,
		engine:   eo,
		tickMs:   max(1, tick.Milliseconds()),
		lookback: lookback(eo),
		parts:    make(map[tp]*partition),
	}, nil
}

func (c *Consumer) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

// permanentError marks an error that a new session would meet again (a
// state directory that cannot be opened): Run returns it.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// fenced is the permanent error of an instance whose InstanceID another
// member took: a new session would take it back, and the two would fence
// each other in turn.
func (c *Consumer) fenced(err error) error {
	return &permanentError{fmt.Errorf("%w: instance ID %q (%w); give each instance its own", ErrFenced, c.cfg.InstanceID, err)}
}

func (c *Consumer) setFatal(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
	}
	c.mu.Unlock()
}

func (c *Consumer) fatalErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// Run consumes until ctx is done, then ends the open transaction, commits,
// leaves the group and returns nil. A session that fails (a transaction
// that cannot end, an engine commit that fails) is closed, its engines
// dropped as a crash would, and a new one started after
// [Options.RetryBackoff]; the recovery on assignment (see the package doc)
// makes that safe. Run returns an error only for a permanent failure, such
// as a state directory that cannot be opened.
//
// Once ctx is done, Run returns within [Options.ShutdownTimeout] whatever
// it is doing, and returns [ErrFenced] if another member took this
// instance's [Options.InstanceID].
func (c *Consumer) Run(ctx context.Context) error {
	endCtx, endCancel := context.WithCancel(context.Background())
	closeCtx, closeCancel := context.WithCancel(context.Background())
	hardCtx, hardCancel := context.WithCancel(context.Background())
	defer endCancel()
	defer closeCancel()
	defer hardCancel()
	c.endCtx, c.closeCtx, c.hardCtx = endCtx, closeCtx, hardCtx
	d := c.cfg.ShutdownTimeout
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(d/2, endCancel)
		time.AfterFunc(d*3/4, closeCancel)
		time.AfterFunc(d, hardCancel)
	})
	defer stop()
	c.cleanScratch()
	exportCtx, exportCancel := context.WithCancel(context.Background())
	c.exportCtx = exportCtx
	defer c.exports.Wait()
	defer exportCancel()
	for {
		c.stats.sessn.Add(1)
		err := c.session(ctx)
		c.closeAll()
		if ctx.Err() != nil {
			return nil
		}
		if f := c.fatalErr(); f != nil {
			return f
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return err
		}
		c.logf("kafka: session ended: %v; starting a new one in %v", err, c.cfg.RetryBackoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.cfg.RetryBackoff):
		}
	}
}

// clientOpts are the options every client of this consumer starts from.
func (c *Consumer) clientOpts(more ...kgo.Opt) []kgo.Opt {
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.cfg.Brokers...)}, more...)
	return append(opts, c.cfg.ClientOpts...)
}

// session runs one group session: join, poll-process-transact, leave.
func (c *Consumer) session(ctx context.Context) error {
	adminCl, err := kgo.NewClient(c.clientOpts()...)
	if err != nil {
		return &permanentError{fmt.Errorf("kafka: admin client: %w", err)}
	}
	defer adminCl.Close()
	c.admin, c.adminCl = kadm.NewClient(adminCl), adminCl
	checkCtx, stopCheck := context.WithCancel(ctx)
	defer stopCheck()
	go c.checkBrokers(checkCtx, adminCl)
	c.checkTopics(ctx)
	c.readLimits(ctx)

	opts := c.clientOpts(
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.cfg.Topic),
		kgo.TransactionalID(c.cfg.TransactionalID),
		kgo.TransactionTimeout(c.cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(c.cfg.SessionTimeout),
		// Kafka's advice: heartbeat at most every third of the session.
		kgo.HeartbeatInterval(min(3*time.Second, c.cfg.SessionTimeout/3)),
		kgo.RebalanceTimeout(c.cfg.RebalanceTimeout),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(c.cfg.ResetOffset),
		kgo.MetadataMaxAge(c.cfg.MetadataMaxAge),
		// Output topics missing are created if the brokers allow it;
		// checkTopics warns about them.
		kgo.AllowAutoTopicCreation(),
		// Batches as large as each topic takes, no larger: a record the
		// topic refuses is rejected before it is produced (tooLarge).
		kgo.ProducerBatchMaxBytesFn(c.batchLimit),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { c.joined.Store(true) }),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		kgo.AdjustFetchOffsetsFn(c.adjust),
	)
	if c.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(c.cfg.InstanceID))
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return &permanentError{fmt.Errorf("kafka: group client: %w", err)}
	}
	c.sess = sess
	c.rebalanced.Store(false)
	defer c.joined.Store(false)
	defer c.closeSession(ctx, sess)
	return c.loop(ctx, sess)
}

// closeSession closes the group client: its last revoke commits and
// closes the engines, and a dynamic member leaves the group. A static
// member (InstanceID) that is shutting down leaves the group too, unless
// KeepStaticMembership says to keep its place for a restart: franz-go
// does not leave for one, so it is asked here by instance ID. Once Run's
// context is done this takes at most ShutdownTimeout: a client still
// closing then (waiting on a join the group has not completed) is
// abandoned.
func (c *Consumer) closeSession(ctx context.Context, sess *kgo.GroupTransactSession) {
	member, _ := sess.Client().GroupMetadata()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sess.CloseAllowingRebalance()
	}()
	select {
	case <-done:
	case <-c.closeCtx.Done():
		c.logf("kafka: the group client is still closing %v after the shutdown began; abandoning it", c.cfg.ShutdownTimeout*3/4)
	}
	if ctx.Err() == nil || c.cfg.InstanceID == "" || c.cfg.KeepStaticMembership || member == "" || errors.Is(c.fatalErr(), ErrFenced) {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = c.cfg.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = member
	m.InstanceID = &c.cfg.InstanceID
	m.Reason = kmsg.StringPtr("dedup kafka shutting down")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(c.hardCtx, c.adminCl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, m := range resp.Members {
			if err == nil {
				err = kerr.ErrorForCode(m.ErrorCode)
			}
		}
	}
	if err != nil {
		c.logf("kafka: leave the group as static member %s: %v (its partitions wait for the session timeout, %v)", c.cfg.InstanceID, err, c.cfg.SessionTimeout)
		return
	}
	c.logf("kafka: left the group as static member %s", c.cfg.InstanceID)
}

// errClientClosed ends a session whose client was closed under it.
var errClientClosed = errors.New("kafka: client closed")

// pollWait bounds one idle poll, so that the loop notices a fatal error
// from a callback.
const pollWait = 500 * time.Millisecond

// betweenPolls is the loop's work before a poll, under roundMu: a revoke
// may run beside it (the previous iteration allowed rebalances). done ends
// the loop with err.
func (c *Consumer) betweenPolls(ctx context.Context) (done bool, err error) {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	if err := c.fatalErr(); err != nil {
		return true, err
	}
	if p := c.commitErr.Load(); p != nil {
		return true, c.waitCommits()
	}
	if ctx.Err() != nil {
		return true, c.commitRound(true)
	}
	c.exportDue()
	return false, nil
}

// loop polls, processes and ends a transaction per batch until ctx is done
// or the session fails.
func (c *Consumer) loop(ctx context.Context, sess *kgo.GroupTransactSession) error {
	for {
		if done, err := c.betweenPolls(ctx); done {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, pollWait)
		fetches := sess.PollRecords(pctx, c.cfg.MaxTxnRecords)
		cancel()
		if fetches.IsClientClosed() {
			return errClientClosed
		}
		c.logFetchErrors(fetches)
		if c.rebalanced.Swap(false) {
			if err := c.clearRebalance(sess); err != nil {
				return err
			}
			sess.AllowRebalance()
			continue
		}
		if fetches.NumRecords() == 0 {
			sess.AllowRebalance()
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("%w: begin: %w", ErrTxn, err)
		}
		c.produceErr.Store(nil)
		c.txnRecords, c.txnNews, c.txnDups, c.txnRejected = 0, 0, 0, 0
		start := time.Now()
		err := c.stage(fetches)
		for err == nil && c.txnRecords < c.cfg.MaxTxnRecords && ctx.Err() == nil {
			left := c.cfg.MaxTxnTime - time.Since(start)
			if left <= 0 {
				break
			}
			pctx, cancel := context.WithTimeout(ctx, left)
			more := sess.PollRecords(pctx, c.cfg.MaxTxnRecords-c.txnRecords)
			cancel()
			if more.IsClientClosed() {
				err = errClientClosed
				break
			}
			c.logFetchErrors(more)
			if more.NumRecords() == 0 {
				break
			}
			err = c.stage(more)
		}
		if err != nil {
			// A failure inside processing (an engine error): abort, and let
			// a new session start from the committed state.
			c.end(sess, false)
			return err
		}
		if c.testHook != nil {
			if err := c.testHook("before-end"); err != nil {
				c.release(c.staged)
				c.staged = c.staged[:0]
				return err
			}
		}
		if err := c.end(sess, true); err != nil {
			return err
		}
		sess.AllowRebalance()
	}
}

// clearRebalance runs between transactions after partitions were revoked
// or lost. franz-go's GroupTransactSession marks itself failed in its
// revoke and lost callbacks and clears the mark only in End, so the first
// transaction after a rebalance would abort however long after it begins,
// and the partitions this instance kept would be rewound for nothing.
// Rebalances happen here only between transactions (the loop blocks them
// while it polls and processes), so nothing is at risk: an End with no
// transaction open clears the mark. It also rewinds every partition's
// fetch position to its committed offset, which the last transaction left
// them at, so the records polled since are fetched again: the caller drops
// them.
func (c *Consumer) clearRebalance(sess *kgo.GroupTransactSession) error {
	ctx, cancel := context.WithTimeout(c.endCtx, c.cfg.TransactionTimeout)
	defer cancel()
	if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("%w: end after a rebalance: %w", ErrTxn, err)
	}
	return nil
}

func (c *Consumer) logFetchErrors(fs kgo.Fetches) {
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, kerr.FencedInstanceID) {
			c.setFatal(c.fenced(err))
			return
		}
		c.logf("kafka: fetch %s-%d: %v", t, p, err)
	})
}

// stage processes polled records into the open transaction, counting
// them in txnRecords.
func (c *Consumer) stage(fs kgo.Fetches) error {
	var err error
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if err != nil || len(p.Records) == 0 {
			return
		}
		c.txnRecords += len(p.Records)
		c.mu.Lock()
		pt := c.parts[tp{p.Topic, p.Partition}]
		ok := pt != nil && pt.ready
		c.mu.Unlock()
		if !ok {
			err = fmt.Errorf("kafka: records for %s-%d, which has no ready engine", p.Topic, p.Partition)
			return
		}
		if p.HighWatermark >= 0 {
			pt.lag.Store(max(0, p.HighWatermark-p.Records[len(p.Records)-1].Offset-1))
		}
		if pt.next < 0 { // not yet in this transaction
			c.staged = append(c.staged, pt)
		}
		err = c.process(pt, p.Records, true)
	})
	return err
}

// lookback is how far before a partition's committed record a rebuild
// replays: the window and a span, or under AutoWindow the longest window
// and a span (the window in force may be any in between).
func lookback(eo dedup.Options) time.Duration {
	w := eo.Window
	if eo.AutoWindow != nil {
		w = max(w, eo.AutoWindow.Max)
	}
	return w + eo.Window/time.Duration(eo.Generations)
}
