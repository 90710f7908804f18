// Package kafka runs dedup as a Kafka consumer group: every assigned input
// partition gets its own [dedup.Engine], and the first sighting of each key
// within the window is written to an output topic exactly once, in Kafka
// transactions that also commit the input offsets (read-process-write).
//
// Create a [Consumer] with [New] from a [Options] (brokers, group, input
// and output topics, a state directory; every other field has a default),
// run it with [Consumer.Run] until its context is canceled, and read its
// counters with [Consumer.Stats]. [Options.OnReady] reports how each
// assigned partition's state was made current ([Ready]). Keys come from a
// [KeyFunc]: [RecordKey], [HeaderKey], or one of the caller's. The command
// "dedup kafka" is this package behind flags.
//
// Partitions are the unit of parallelism and of state: the engine of
// partition P of topic T lives in StateDir/T-P, its checkpoint is the input
// offset it has committed through, and duplicates are found within a
// partition only, so producers must partition the input by the dedup key
// (the record key is the natural choice, and the default). Kafka's consumer
// group moves partitions between instances (cooperative-sticky balancing,
// static membership with [Options.InstanceID]); there is no other cluster
// protocol.
//
// # Exactly once, and why a crash cannot make the engine and Kafka disagree
//
// Two things are committed for each batch of input records: the Kafka
// transaction (the distinct records written to the output topic, the
// duplicates and rejects to their topics, and the group's input offset C)
// and the engine's commit (the batch's new keys, with checkpoint E = the
// input offset after the batch). They cannot be one atomic step, so their
// order and the recovery on assignment make every crash point safe:
//
//  1. The engine commits only after the transaction has committed, so
//     E <= C always holds: Kafka is the source of truth and the engine is a
//     cache of it that may lag but never leads. To keep fsyncs off the
//     path of every transaction, each partition marks the keys of a
//     committed transaction with [dedup.Engine.Barrier], and the engines
//     commit through their barriers ([dedup.Engine.CommitThrough]) in
//     rounds, every [Options.EngineCommitInterval], beside the next
//     transactions; until then those keys are in flight, and a repeat of
//     one is reported InFlight and dropped, as it should be.
//  2. A transaction that aborts (a failed produce, offset commit or EndTxn,
//     a rebalance, a lost session) releases its new keys with
//     [dedup.Engine.Forget]; the session rewinds the input to C and the
//     records are decided again, as if seen for the first time.
//  3. When a partition is assigned, its engine is opened and E compared
//     with the group's committed offset C (read with RequireStable, so a
//     transaction still in doubt is resolved first):
//     E == C: the state is current. E < C: the records in [E, C) were
//     decided, and their distinct ones written, by a committed
//     transaction whose engine commit was lost (crash between the two
//     commits) or made elsewhere (the partition lived on another
//     instance); they are replayed into the engine with output
//     suppressed, then the engine commits C. No state (a new machine):
//     the engine is rebuilt by replaying, output suppressed, from the
//     first offset whose timestamp is at least ts(C-1) - Window (Kafka's
//     ListOffsets by timestamp), since older keys have left the window.
//     E > C cannot follow from rule 1; it means the offsets were reset or
//     the topic recreated, and the state, describing another history, is
//     wiped and rebuilt like a missing one.
//
// The crash points, with what each leaves: before the transaction commits,
// nothing of the batch is durable anywhere (C and E both at the batch's
// start; the batch is reprocessed). During EndTxn, the coordinator decides
// commit or abort; the next assignment sees either C at the batch's end
// (case E < C: replay) or at its start (reprocess). Between the
// transaction's commit and the engine's, C is ahead and the gap is
// replayed. After the engine's commit, E == C. Replay decides exactly as
// the first pass did because the engine's clock is the records' timestamps
// ([dedup.Options.EventTime], each run of records observed at its
// first's timestamp), not the wall clock: the same
// records, in the same order, against the same state give the same
// verdicts, and a replayed New key is one that the committed transaction
// already wrote. Records are observed in runs whose timestamps lie within
// a tick of min(100ms, Window/1000) of the run's first, each run at that
// first timestamp, so the window holds to within one tick.
//
// # Rebalances
//
// The consumer blocks rebalances while it polls and processes
// (kgo.BlockRebalanceOnPoll), and a transaction ends, and its engines
// commit, before a rebalance may proceed. Balancing is cooperative-sticky:
// only the partitions that change owner move, and the others go on without
// an abort (franz-go's session marks itself failed on every revoke until
// its next End; the consumer ends it between transactions). A transaction
// the group aborts under it (a rebalance completing while it is open) is
// read again once the coordinator confirms nothing of it committed.
// [Options.ShutdownTimeout] bounds [Consumer.Run]'s return once its context
// is done; a static member leaves the group unless
// [Options.KeepStaticMembership]. A revoked partition's engine is
// therefore committed when the callback runs; it is closed. A lost one's
// staged work was already released (rule 2); it is closed too. An assigned
// partition is made ready in the offset-adjust callback, which runs after
// the group's offsets are fetched and before the partition is fetched, and
// does not stop the other partitions' processing. A transaction spans at
// most [Options.MaxTxnRecords] records and [Options.MaxTxnTime], well inside
// the transaction and rebalance timeouts.
//
// # Keys
//
// [Options.Key] extracts each record's key ([RecordKey] by default,
// [HeaderKey], or any [KeyFunc], such as a JSON path in the value). A record
// without a usable key never blocks its partition: it goes to
// [Options.RejectsTopic] with the reason in the header [RejectReasonHeader],
// or is dropped and counted when no rejects topic is set.
package kafka
