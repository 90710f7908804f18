package kafka

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/handover"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options configures a [Consumer]. Zero fields select their documented
// defaults; [New] validates every field and names the bad ones, each error
// wrapping [ErrInvalidOptions].
type Options struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Group is the consumer group. Required.
	Group string
	// Topic is the input topic. Required.
	Topic string
	// OutTopic receives the first sighting of each key, exactly once.
	// Required, and distinct from Topic.
	OutTopic string
	// RejectsTopic, when set, receives the records without a usable key,
	// with the reason in the [RejectReasonHeader] header. "" drops them (they
	// are counted in Stats). Default "".
	RejectsTopic string
	// DupsTopic, when set, receives the duplicates, with the verdict in the
	// [VerdictHeader] header. "" drops them. Default "".
	DupsTopic string
	// StateDir holds one engine state per partition, in StateDir/T-P.
	// Required. Two instances must not share one.
	StateDir string
	// InstanceID, when set, makes this instance a static group member: a
	// session that fails and starts again gets its partitions back without
	// a rebalance, and so does a restart within the session timeout when
	// KeepStaticMembership is set. Default "" (dynamic membership).
	InstanceID string
	// KeepStaticMembership keeps a static member (InstanceID set) in the
	// group when [Consumer.Run] returns, so that a restart within
	// SessionTimeout gets the same partitions back without a rebalance;
	// until then they are not consumed. Default false: Run leaves the
	// group, and its partitions move to the other members at once.
	KeepStaticMembership bool
	// TransactionalID fences a previous incarnation of this instance: a
	// restart aborts the transaction its predecessor left open. It must be
	// unique per instance and stable across its restarts. Default
	// "dedup-<Group>-<InstanceID>", or without InstanceID
	// "dedup-<Group>-" followed by a hash of the host name and the
	// absolute StateDir.
	TransactionalID string
	// ResetOffset is where the group starts a partition it has no committed
	// offset for (a new group, or a partition added to the input), and
	// where it goes when its committed offset has left the log:
	// kgo.NewOffset().AtStart(), .AtEnd() or .AfterMilli(ms). The zero
	// Offset selects the earliest offset. Default: the earliest.
	ResetOffset kgo.Offset
	// MetadataMaxAge bounds how long partitions added to the input go
	// unnoticed (the group rebalances to assign them). Default 10s.
	MetadataMaxAge time.Duration
	// BrokerCheckInterval is how often the consumer checks that it can
	// reach a broker (a Metadata request, through TLS and SASL). While
	// it cannot, each check logs the error and [Consumer.BrokerErr]
	// returns it; the consumer goes on retrying. Default 15s.
	BrokerCheckInterval time.Duration
	// Key extracts each record's key. Default [RecordKey]().
	Key KeyFunc
	// Engine is the template of every partition's engine options: Window,
	// ExpectedRate (per partition), FalsePositiveRate, Probabilistic,
	// Filter, Refresh, ... Its Dir is set per partition and EventTime is
	// turned on (the window runs on record timestamps): Dir and Now must
	// be empty here. Default: the engine's defaults, with SnapshotInterval
	// 1m so that a reassigned partition reopens from a snapshot.
	Engine dedup.Options
	// MaxTxnRecords bounds the input records of one transaction. Default
	// 10000.
	MaxTxnRecords int
	// MaxTxnTime bounds how long one transaction collects records after
	// its first. Default 100ms.
	MaxTxnTime time.Duration
	// EngineCommitInterval is how often the engines commit (fsync) the
	// keys of committed transactions; until then a crash costs a replay
	// of that much input, with output suppressed. Engines also commit
	// when one holds half of Engine.MaxInFlight keys. Default 1s.
	EngineCommitInterval time.Duration
	// SessionTimeout is the group session timeout. Default 45s (Kafka's).
	SessionTimeout time.Duration
	// RebalanceTimeout is the group rebalance timeout. Default 60s.
	RebalanceTimeout time.Duration
	// TransactionTimeout is the producer's transaction timeout. Default 40s.
	TransactionTimeout time.Duration
	// RetryBackoff is the pause before a new session after a failed one.
	// Default 1s.
	RetryBackoff time.Duration
	// ShutdownTimeout bounds how long [Consumer.Run] takes to return once
	// its context is done, whatever the consumer is doing (joining the
	// group, replaying, ending a transaction): the open transaction gets
	// half of it to end, leaving the group the rest; what is not done by
	// then is abandoned, as a crash would (the package doc's recovery
	// makes that safe). Default 5s.
	ShutdownTimeout time.Duration
	// Logf receives the consumer's log lines. nil discards them. It is also
	// the engines' [dedup.Options.Logf] unless Engine sets one.
	Logf func(format string, args ...any)
	// OnReady, when set, is called when an assigned partition is ready
	// (its state current), with how it got there ([Ready]). It must not
	// block.
	OnReady func(Ready)
	// Handover, when set, is the store through which partition states
	// move between instances: each partition's engine exports its state
	// every HandoverInterval and when the partition is revoked, and a
	// partition assigned without current local state imports the newest
	// export at or before the group's committed offset and replays only
	// the records after it (see the package doc). nil (the default):
	// states are rebuilt by replay. The caller closes it after Run.
	Handover *handover.Store
	// HandoverInterval is how often each partition's state is exported.
	// Default 5m.
	HandoverInterval time.Duration
	// HandoverRevokeTimeout bounds the upload of revoked partitions'
	// exports, which holds up the rebalance (and, on shutdown,
	// ShutdownTimeout bounds it too); their backups, local snapshots and
	// hard links, always complete. An upload not done by then is abandoned
	// and the next owner imports an older export and replays the records
	// after it. Default 5s.
	HandoverRevokeTimeout time.Duration
	// HandoverImportTimeout bounds one partition's import; past it the
	// partition is rebuilt by replay. Default 1m.
	HandoverImportTimeout time.Duration
	// ClientOpts are appended to every franz-go client's options (tests
	// and tuning: timeouts, TLS, SASL, a logger).
	ClientOpts []kgo.Opt
}

// Ready describes how an assigned partition became ready; it is passed
// to [Options.OnReady].
type Ready struct {
	// Topic and Partition name the partition.
	Topic     string
	Partition int32
	// Committed is the group's committed offset (-1 for none).
	Committed int64
	// Local is the engine's checkpoint when opened (-1 for none).
	Local int64
	// From is where the replay started; Replayed the records it fed.
	From     int64
	Replayed int64
	// Rebuilt reports a state rebuilt from ts-Window (none, or wiped).
	Rebuilt bool
	// Imported is the offset of the export imported through
	// [Options.Handover] (-1 for none); the replay began there. Fallback
	// says why none was imported when one was looked for (a Fallback*
	// reason; "" otherwise).
	Imported int64
	Fallback string
	// Took is the time from assignment to ready.
	Took time.Duration
}

// Defaults of [Options]'s fields of the same names.
const (
	DefaultMaxTxnRecords        = 10000
	DefaultMaxTxnTime           = 100 * time.Millisecond
	DefaultSessionTimeout       = 45 * time.Second
	DefaultRebalanceTimeout     = 60 * time.Second
	DefaultTransactionTimeout   = 40 * time.Second
	DefaultRetryBackoff         = time.Second
	DefaultEngineCommitInterval = time.Second
	DefaultShutdownTimeout      = 5 * time.Second
	DefaultMetadataMaxAge       = 10 * time.Second
	DefaultBrokerCheckInterval  = 15 * time.Second
	DefaultHandoverInterval     = 5 * time.Minute
	DefaultHandoverRevoke       = 5 * time.Second
	DefaultHandoverImport       = time.Minute
	defaultSnapshotInterval     = time.Minute
)

// withDefaults returns c with every zero field set to its default.
func (c Options) withDefaults() Options {
	if c.Key == nil {
		c.Key = RecordKey()
	}
	c.MaxTxnRecords = cmp.Or(c.MaxTxnRecords, DefaultMaxTxnRecords)
	c.MaxTxnTime = cmp.Or(c.MaxTxnTime, DefaultMaxTxnTime)
	c.SessionTimeout = cmp.Or(c.SessionTimeout, DefaultSessionTimeout)
	c.RebalanceTimeout = cmp.Or(c.RebalanceTimeout, DefaultRebalanceTimeout)
	c.TransactionTimeout = cmp.Or(c.TransactionTimeout, DefaultTransactionTimeout)
	c.EngineCommitInterval = cmp.Or(c.EngineCommitInterval, DefaultEngineCommitInterval)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.ResetOffset = cmp.Or(c.ResetOffset, kgo.NewOffset().AtStart())
	c.MetadataMaxAge = cmp.Or(c.MetadataMaxAge, DefaultMetadataMaxAge)
	c.BrokerCheckInterval = cmp.Or(c.BrokerCheckInterval, DefaultBrokerCheckInterval)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.HandoverInterval = cmp.Or(c.HandoverInterval, DefaultHandoverInterval)
	c.HandoverRevokeTimeout = cmp.Or(c.HandoverRevokeTimeout, DefaultHandoverRevoke)
	c.HandoverImportTimeout = cmp.Or(c.HandoverImportTimeout, DefaultHandoverImport)
	c.Engine.SnapshotInterval = cmp.Or(c.Engine.SnapshotInterval, defaultSnapshotInterval)
	if c.TransactionalID == "" {
		if c.InstanceID != "" {
			c.TransactionalID = "dedup-" + c.Group + "-" + c.InstanceID
		} else {
			host, _ := os.Hostname()
			dir, err := filepath.Abs(c.StateDir)
			if err != nil {
				dir = c.StateDir
			}
			sum := sha256.Sum256([]byte(host + "\x00" + dir))
			c.TransactionalID = "dedup-" + c.Group + "-" + hex.EncodeToString(sum[:8])
		}
	}
	return c
}

// validate names every bad field; c has its defaults.
func (c *Options) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "must name at least one broker")
	}
	for i, b := range c.Brokers {
		if b == "" {
			bad("Brokers", "entry %d is empty", i)
		}
	}
	if c.Group == "" {
		bad("Group", "is required")
	}
	if c.Topic == "" {
		bad("Topic", "is required")
	}
	if c.OutTopic == "" {
		bad("OutTopic", "is required")
	}
	for _, t := range []struct{ name, v string }{{"OutTopic", c.OutTopic}, {"RejectsTopic", c.RejectsTopic}, {"DupsTopic", c.DupsTopic}} {
		if t.v != "" && t.v == c.Topic {
			bad(t.name, "must differ from Topic %q (it would read its own output)", c.Topic)
		}
	}
	if c.StateDir == "" {
		bad("StateDir", "is required")
	}
	if c.Engine.Dir != "" {
		bad("Engine.Dir", "must be empty: each partition's is StateDir/<topic>-<partition>")
	}
	if c.Engine.Now != nil {
		bad("Engine.Now", "must be nil: the engine's clock is the records' timestamps")
	}
	if c.Engine.AutoCommit != 0 {
		bad("Engine.AutoCommit", "must be 0: engines commit after each transaction")
	}
	eo := c.Engine
	eo.WithDefaults()
	if c.StateDir != "" && eo.Dir == "" {
		// Checked as a partition's engine is opened: Filter fuse needs a Dir.
		eo.Dir = filepath.Join(c.StateDir, c.Topic+"-0")
	}
	if err := eo.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: Engine: %w", ErrInvalidOptions, err))
	}
	if c.MaxTxnRecords < 1 {
		bad("MaxTxnRecords", "must be at least 1, got %d", c.MaxTxnRecords)
	} else if c.MaxTxnRecords > eo.MaxInFlight/2 {
		bad("MaxTxnRecords", "must not exceed half of Engine.MaxInFlight (%d), got %d", eo.MaxInFlight, c.MaxTxnRecords)
	}
	if c.MaxTxnTime <= 0 {
		bad("MaxTxnTime", "must be positive, got %v", c.MaxTxnTime)
	} else if c.MaxTxnTime > c.TransactionTimeout/4 {
		bad("MaxTxnTime", "must be at most a quarter of TransactionTimeout %v, got %v", c.TransactionTimeout, c.MaxTxnTime)
	}
	if c.SessionTimeout <= 0 {
		bad("SessionTimeout", "must be positive, got %v", c.SessionTimeout)
	}
	if c.RebalanceTimeout <= 0 {
		bad("RebalanceTimeout", "must be positive, got %v", c.RebalanceTimeout)
	}
	if c.TransactionTimeout <= 0 {
		bad("TransactionTimeout", "must be positive, got %v", c.TransactionTimeout)
	}
	if c.EngineCommitInterval < 0 {
		bad("EngineCommitInterval", "must not be negative, got %v", c.EngineCommitInterval)
	}
	if c.RetryBackoff < 0 {
		bad("RetryBackoff", "must not be negative, got %v", c.RetryBackoff)
	}
	if c.MetadataMaxAge < 0 {
		bad("MetadataMaxAge", "must not be negative, got %v", c.MetadataMaxAge)
	}
	if c.BrokerCheckInterval < 0 {
		bad("BrokerCheckInterval", "must not be negative, got %v", c.BrokerCheckInterval)
	}
	if c.ShutdownTimeout < 0 {
		bad("ShutdownTimeout", "must not be negative, got %v", c.ShutdownTimeout)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"HandoverInterval", c.HandoverInterval}, {"HandoverRevokeTimeout", c.HandoverRevokeTimeout}, {"HandoverImportTimeout", c.HandoverImportTimeout}} {
		if d.v < 0 {
			bad(d.name, "must not be negative, got %v", d.v)
		}
	}
	if c.KeepStaticMembership && c.InstanceID == "" {
		bad("KeepStaticMembership", "needs InstanceID (only a static member keeps its place)")
	}
	return errors.Join(errs...)
}
