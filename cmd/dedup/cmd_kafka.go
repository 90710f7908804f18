package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/handover"
	"github.com/streamdedup/dedup/kafka"
	"github.com/streamdedup/dedup/stream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaConfig holds the flags of `dedup kafka`.
type kafkaConfig struct {
	brokers      string
	group        string
	topic        string
	outTopic     string
	state        string
	key          string
	keyFrom      string
	engine       engineFlags
	rejectsTopic string
	dupsTopic    string
	instanceID   string
	txnID        string
	metrics      string
	txnRecords   int
	txnTime      time.Duration
	commitEvery  time.Duration
	session      time.Duration
	rebalance    time.Duration
	txnTimeout   time.Duration
	shutdown     time.Duration
	keepStatic   bool
	maxKey       int
	startOffset  string
	auth         kafkaAuth
	clientConfig stringList
	handover     string
	hoInterval   time.Duration
	hoRevoke     time.Duration
	hoImport     time.Duration
}

const kafkaHelpHead = `Usage: dedup kafka --brokers HOST:PORT --group G --topic IN --out-topic OUT --state DIR [flags]
       dedup kafka dev-broker [--port 9092] [--partitions N] [--topics T,...]

Run as a member of Kafka consumer group G: read IN, write the first sighting
of each key within --window to OUT exactly once, in Kafka transactions that
also commit the input offsets. Each assigned partition has its own engine,
in DIR/<topic>-<partition>; the group moves partitions between instances,
and a partition that arrives without current state is rebuilt by replaying
its input from (last timestamp - window) with output suppressed. With
--handover URL, each partition's state is exported to a shared store every
--handover-interval and when the partition is revoked, and a partition that
arrives without current state imports the newest export at or before the
group's committed offset, then replays only the records after it.

Duplicates are found within a partition: producers must partition IN by the
dedup key (the record key is the natural choice, and the default).

Flags:
`

const kafkaHelpTail = `
Keys: --key-from record-key (default) uses the record key; header:NAME the
value of header NAME; --key PATH[,PATH...] members of the JSON value, as in
dedup filter. A record without a usable key goes to --rejects-topic with
the reason in the dedup-reject-reason header (dropped and counted without
one); it never blocks its partition. --dups-topic receives the duplicates.

A record larger than the output topic takes (its max.message.bytes, which
the producer follows) goes to --rejects-topic too, without its value if
that topic cannot take it either.

The window runs on record timestamps, not the wall clock. Run one process
per machine (or per --state); --instance-id makes it a static member, so a
failed session rejoins without a rebalance. SIGTERM or SIGINT: end the
transaction, commit, leave the group (a static member too, unless
--keep-static-membership keeps its partitions for a restart within the
session timeout), exit 0, all within --shutdown-timeout whatever the state
(joining, replaying). Another instance joining with the same --instance-id
fences this one: it exits 1 saying so. DEDUP_KAFKA_LOG=info (or debug) adds
the Kafka client's log to stderr.

dev-broker starts an in-process Kafka-protocol broker (franz-go's kfake, in
memory, for trying dedup locally; topics are created on first use).

Examples:
  dedup kafka dev-broker --port 9092 &
  dedup kafka --brokers 127.0.0.1:9092 --group dedup --topic in --out-topic out --state ./state
  printf 'k1:a\nk2:b\nk1:c\n' | kcat -P -b 127.0.0.1:9092 -t in -K:
  kcat -C -b 127.0.0.1:9092 -t out -X isolation.level=read_committed -K: -e
`

func newKafkaFlags(e *env) (*flag.FlagSet, *kafkaConfig) {
	c := &kafkaConfig{}
	fs := newFlags(e, "dedup kafka", kafkaHelpHead, kafkaHelpTail)
	fs.StringVar(&c.brokers, "brokers", "", "seed brokers, `HOST:PORT[,HOST:PORT...]` (required)")
	fs.StringVar(&c.group, "group", "", "consumer `GROUP` (required)")
	fs.StringVar(&c.topic, "topic", "", "input `TOPIC` (required)")
	fs.StringVar(&c.outTopic, "out-topic", "", "output `TOPIC`: each distinct record once (required)")
	fs.StringVar(&c.state, "state", "", "state `DIR`: one engine per partition in DIR/<topic>-<partition> (required)")
	fs.StringVar(&c.key, "key", "", "key from the JSON value: member `PATH`s, comma-separated (e.g. event_id or user.id,seq)")
	fs.StringVar(&c.keyFrom, "key-from", "record-key", "key `SOURCE`: record-key or header:NAME")
	fs.IntVar(&c.maxKey, "max-key", engineDefaults.MaxKeySize, "reject keys over `N` bytes")
	fs.StringVar(&c.startOffset, "start-offset", "earliest", "where a partition without a committed offset starts: `earliest`, latest, or an RFC 3339 time (the first record at or after it)")
	c.engine.register(fs, tuneUsage)
	c.auth.register(fs)
	fs.Var(&c.clientConfig, "client-config", "Kafka client setting `KEY=VALUE` (repeatable): client.id, linger.ms, compression.type, fetch.max.bytes, ...; an unknown key is an error listing the known ones")
	fs.StringVar(&c.rejectsTopic, "rejects-topic", "", "send records without a usable key to `TOPIC` (default: drop and count them)")
	fs.StringVar(&c.dupsTopic, "dups-topic", "", "send duplicates to `TOPIC` (default: drop them)")
	fs.StringVar(&c.instanceID, "instance-id", "", "static group membership `ID`, unique per instance and stable across its restarts")
	fs.StringVar(&c.txnID, "transactional-id", "", "transactional `ID` (default: dedup-GROUP-INSTANCE, or a hash of host and --state)")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (e.g. 127.0.0.1:9090) at /metrics, liveness at /healthz, readiness at /readyz")
	fs.IntVar(&c.txnRecords, "txn-records", kafka.DefaultMaxTxnRecords, "at most `N` input records per transaction")
	fs.DurationVar(&c.txnTime, "txn-time", kafka.DefaultMaxTxnTime, "a transaction collects records for at most `DURATION`")
	fs.DurationVar(&c.commitEvery, "engine-commit-interval", kafka.DefaultEngineCommitInterval, "engines fsync committed transactions' keys every `DURATION` (a crash replays that much, output suppressed)")
	fs.DurationVar(&c.session, "session-timeout", kafka.DefaultSessionTimeout, "group session timeout")
	fs.DurationVar(&c.rebalance, "rebalance-timeout", kafka.DefaultRebalanceTimeout, "group rebalance timeout")
	fs.DurationVar(&c.txnTimeout, "transaction-timeout", kafka.DefaultTransactionTimeout, "transaction timeout")
	fs.DurationVar(&c.shutdown, "shutdown-timeout", kafka.DefaultShutdownTimeout, "on SIGTERM, exit within `DURATION` whatever the state")
	fs.StringVar(&c.handover, "handover", "", "hand partition state over through the store at `URL`: file:///DIR (a shared filesystem) or s3://BUCKET?region=R[&endpoint=URL&use_path_style=true] (credentials from the AWS environment)")
	fs.DurationVar(&c.hoInterval, "handover-interval", kafka.DefaultHandoverInterval, "with --handover, export each partition's state every `DURATION`")
	fs.DurationVar(&c.hoRevoke, "handover-revoke-timeout", kafka.DefaultHandoverRevoke, "with --handover, give the upload of revoked partitions' exports at most `DURATION` (it holds up the rebalance; the next owner imports an older export if it runs out)")
	fs.DurationVar(&c.hoImport, "handover-import-timeout", kafka.DefaultHandoverImport, "with --handover, give one partition's import at most `DURATION`, then replay instead")
	fs.BoolVar(&c.keepStatic, "keep-static-membership", false, "with --instance-id, do not leave the group on SIGTERM: a restart within the session timeout gets the same partitions back")
	return fs, c
}

func runKafka(e *env, args []string) error {
	if len(args) > 0 && args[0] == "dev-broker" {
		return runKafkaDevBroker(e, args[1:])
	}
	fs, c := newKafkaFlags(e)
	if _, err := positionals(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"brokers", c.brokers}, {"group", c.group}, {"topic", c.topic}, {"out-topic", c.outTopic}, {"state", c.state}} {
		if f.v == "" {
			return usagef("kafka: --%s is required", f.name)
		}
	}
	if c.metrics != "" {
		if err := checkAddr("--metrics", c.metrics); err != nil {
			return err
		}
	}
	explicit := explicitFlags(fs)
	if c.key != "" && explicit["key-from"] {
		return usagef("kafka: --key and --key-from are exclusive")
	}
	if c.maxKey < 1 {
		return usagef("kafka: --max-key %d: must be at least 1", c.maxKey)
	}
	if err := checkKafkaNumbers(c); err != nil {
		return err
	}
	start, err := parseStartOffset(c.startOffset)
	if err != nil {
		return usageErr(err)
	}
	opts := c.engine.options("")
	opts.MaxKeySize = c.maxKey
	if err := c.engine.checkAuto(explicit); err != nil {
		return err
	}
	if err := checkOptions(opts, explicit); err != nil {
		return err
	}
	// Every partition's state keeps the shape it was created with; a flag
	// that contradicts it is an error naming both.
	if dir := firstPartitionState(c.state, c.topic); dir != "" {
		if err := adoptState(dir, explicit, &opts); err != nil {
			return err
		}
		opts.Dir = ""
	}
	keyFn, err := kafkaKeyFunc(c, opts)
	if err != nil {
		return usageErr(fmt.Errorf("kafka: %w", err))
	}
	cfg := kafka.Options{
		Brokers:              strings.Split(c.brokers, ","),
		Group:                c.group,
		Topic:                c.topic,
		OutTopic:             c.outTopic,
		RejectsTopic:         c.rejectsTopic,
		DupsTopic:            c.dupsTopic,
		StateDir:             c.state,
		InstanceID:           c.instanceID,
		TransactionalID:      c.txnID,
		Key:                  keyFn,
		Engine:               opts,
		MaxTxnRecords:        c.txnRecords,
		MaxTxnTime:           c.txnTime,
		EngineCommitInterval: c.commitEvery,
		SessionTimeout:       c.session,
		RebalanceTimeout:     c.rebalance,
		TransactionTimeout:   c.txnTimeout,
		ShutdownTimeout:      c.shutdown,
		ResetOffset:          start,
		KeepStaticMembership: c.keepStatic,
		Logf: func(format string, args ...any) {
			kafkaLogf(e, strings.TrimPrefix(format, "kafka: "), args...)
		},
	}
	clientOpts, err := kafkaClientOpts(e, c)
	if err != nil {
		return err
	}
	cfg.ClientOpts = append(cfg.ClientOpts, clientOpts...)
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"handover-interval", c.hoInterval}, {"handover-revoke-timeout", c.hoRevoke}, {"handover-import-timeout", c.hoImport}} {
		if f.v <= 0 {
			return usagef("kafka: --%s %v: must be positive", f.name, f.v)
		}
		if explicit[f.name] && c.handover == "" {
			return usagef("kafka: --%s needs --handover", f.name)
		}
	}
	cfg.HandoverInterval, cfg.HandoverRevokeTimeout, cfg.HandoverImportTimeout = c.hoInterval, c.hoRevoke, c.hoImport
	if c.handover != "" {
		store, err := handover.Open(context.Background(), c.handover)
		if err != nil {
			return usageErr(fmt.Errorf("kafka: --handover: %w", err))
		}
		defer store.Close()
		cfg.Handover = store
	}
	cons, err := kafka.New(cfg)
	if err != nil {
		return usageErr(err)
	}
	stopMetrics := func() error { return nil }
	if c.metrics != "" {
		if stopMetrics, err = listenKafkaMetrics(c.metrics, cons); err != nil {
			return err
		}
	}
	kafkaLogf(e, "group %s, %s -> %s, window %v, state %s", c.group, c.topic, c.outTopic, opts.Window, c.state)
	runErr := runConsumer(e, c, cons)
	return errors.Join(runErr, stopMetrics())
}

// runConsumer runs cons until it fails or a signal arrives, then logs its
// summary.
func runConsumer(e *env, c *kafkaConfig, cons *kafka.Consumer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.sigs:
			leave := "leaving the group"
			if c.keepStatic {
				leave = "keeping the static membership of " + c.instanceID
			}
			kafkaLogf(e, "shutting down within %v: ending the transaction, committing, %s", c.shutdown, leave)
			cancel()
		case <-ctx.Done():
		}
	}()
	err := cons.Run(ctx)
	st := cons.Stats()
	kafkaLogf(e, "%s", strings.TrimPrefix(kafkaSummary(st), "dedup kafka: "))
	return err
}

// kafkaClientOpts returns the Kafka client options dedup kafka's flags and
// environment add: DEDUP_KAFKA_LOG's client log, --sasl and --tls
// (kafkaAuth), and --client-config.
func kafkaClientOpts(e *env, c *kafkaConfig) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	switch lvl := os.Getenv("DEDUP_KAFKA_LOG"); lvl {
	case "":
	case "info", "debug":
		// The Kafka client's own log, for diagnosing group and
		// transaction trouble.
		level := kgo.LogLevelInfo
		if lvl == "debug" {
			level = kgo.LogLevelDebug
		}
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(e.stderr, level, func() string { return "kgo: " })))
	default:
		return nil, usagef("kafka: DEDUP_KAFKA_LOG must be info or debug, got %q", lvl)
	}
	authOpts, err := c.auth.opts(os.Getenv)
	if err != nil {
		return nil, err
	}
	opts = append(opts, authOpts...)
	passOpts, err := parseClientConfig(c.clientConfig)
	if err != nil {
		return nil, err
	}
	return append(opts, passOpts...), nil
}

// checkKafkaNumbers refuses a numeric flag set to 0 or less: the kafka
// package reads a zero field as "use the default", so passing one on
// would silently replace the operator's explicit value.
func checkKafkaNumbers(c *kafkaConfig) error {
	if c.txnRecords < 1 {
		return usagef("kafka: --txn-records %d: must be at least 1", c.txnRecords)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"txn-time", c.txnTime}, {"engine-commit-interval", c.commitEvery}, {"session-timeout", c.session}, {"rebalance-timeout", c.rebalance}, {"transaction-timeout", c.txnTimeout}, {"shutdown-timeout", c.shutdown}} {
		if f.v <= 0 {
			return usagef("kafka: --%s %v: must be positive", f.name, f.v)
		}
	}
	return nil
}

// kafkaLogf writes one log line to stderr: the UTC time to the
// millisecond, "dedup kafka:", the message.
func kafkaLogf(e *env, format string, args ...any) {
	fmt.Fprintf(e.stderr, "%s dedup kafka: %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), fmt.Sprintf(format, args...))
}

// parseStartOffset parses --start-offset.
func parseStartOffset(s string) (kgo.Offset, error) {
	switch s {
	case "earliest":
		return kgo.NewOffset().AtStart(), nil
	case "latest":
		return kgo.NewOffset().AtEnd(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return kgo.Offset{}, fmt.Errorf("kafka: --start-offset must be earliest, latest or an RFC 3339 time, got %q", s)
	}
	return kgo.NewOffset().AfterMilli(t.UnixMilli()), nil
}

// kafkaSummary is the line `dedup kafka` ends with. Its figures are
// those of committed transactions: the records of an aborted one are
// decided again (by this run or the next), and counted then; how many
// records the aborted transactions held is said apart.
func kafkaSummary(st kafka.Stats) string {
	aborted := fmt.Sprintf("%d aborted", st.Aborted)
	if st.Records > st.CommittedRecords {
		aborted += fmt.Sprintf(" (their %d records not counted)", st.Records-st.CommittedRecords)
	}
	return fmt.Sprintf("dedup kafka: %d records, %d new, %d duplicates, %d rejected; %d transactions committed, %s; %d records replayed",
		st.CommittedRecords, st.New, st.Duplicates, st.Rejected, st.Committed, aborted, st.Replayed)
}

// firstPartitionState returns the first existing state of topic's
// partitions under root, "" if none.
func firstPartitionState(root, topic string) string {
	ms, _ := filepath.Glob(filepath.Join(root, topic+"-*"))
	sort.Strings(ms)
	for _, m := range ms {
		if isState(m) {
			return m
		}
	}
	return ""
}

// kafkaKeyFunc builds the key source the flags say: the JSON extractor of
// dedup filter for --key, else --key-from. The kafka package calls it from
// several goroutines; each call takes its own extractor from a pool.
func kafkaKeyFunc(c *kafkaConfig, opts dedup.Options) (kafka.KeyFunc, error) {
	if c.key == "" {
		return kafka.ParseKeyFrom(c.keyFrom)
	}
	maxKey := opts.MaxKeySize
	if maxKey == 0 {
		maxKey = engineDefaults.MaxKeySize
	}
	x, err := stream.NewKeyer(stream.KeyConfig{Format: "json", Key: c.key, MaxKey: maxKey, MaxLine: 1 << 30})
	if err != nil {
		return nil, err
	}
	pool := sync.Pool{New: func() any { return x.Clone() }}
	return func(r *kgo.Record) ([]byte, error) {
		if r.Value == nil {
			return nil, fmt.Errorf("%w: a tombstone (null value), and --key reads the value", kafka.ErrNoKey)
		}
		xx := pool.Get().(*stream.Keyer)
		defer pool.Put(xx)
		key, _, err := xx.Key(r.Value, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", kafka.ErrNoKey, err)
		}
		return key, nil
	}, nil
}

// runKafkaDevBroker serves an in-process Kafka-protocol broker until a
// signal.
func runKafkaDevBroker(e *env, args []string) error {
	fs := newFlags(e, "dedup kafka dev-broker", `Usage: dedup kafka dev-broker [--port 9092] [--partitions N] [--topics T,...]

Serve an in-process Kafka-protocol broker (franz-go's kfake: one node, in
memory, transactions and consumer groups) on 127.0.0.1, for trying dedup
kafka locally and in tests. Topics are created on first use with
--partitions partitions. Not for production: nothing is persisted.

Flags:
`, "")
	port := fs.Int("port", 9092, "listen on 127.0.0.1:`PORT` (0: any free port, printed)")
	partitions := fs.Int("partitions", 4, "partitions of each topic created")
	var topics stringList
	fs.Var(&topics, "topics", "create these `TOPICS` now (comma-separated)")
	if _, err := positionals(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if *partitions < 1 {
		return usagef("kafka dev-broker: --partitions must be at least 1, got %d", *partitions)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(*partitions)}
	var names []string
	for _, t := range topics {
		for n := range strings.SplitSeq(t, ",") {
			if n = strings.TrimSpace(n); n == "" {
				return usagef("kafka dev-broker: --topics %q: empty topic name", t)
			}
			names = append(names, n)
		}
	}
	if len(names) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), names...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("kafka dev-broker: %w", err)
	}
	defer c.Close()
	fmt.Fprintf(e.stdout, "%s\n", strings.Join(c.ListenAddrs(), ","))
	if f, ok := e.stdout.(*os.File); ok {
		_ = f.Sync()
	}
	fmt.Fprintf(e.stderr, "dedup kafka dev-broker: listening on %s (in memory; Ctrl-C stops it)\n", strings.Join(c.ListenAddrs(), ","))
	<-e.sigs
	return nil
}
