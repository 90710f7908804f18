package kafka

import "errors"

// Sentinel errors. Test with [errors.Is].
var (
	// ErrInvalidOptions wraps every field of a [Options] that [New] rejects,
	// and a bad source given to [ParseKeyFrom].
	ErrInvalidOptions = errors.New("kafka: invalid options")
	// ErrNoKey is the class of [KeyFunc] errors: the record has no usable
	// key. Such a record goes to [Options.RejectsTopic].
	ErrNoKey = errors.New("kafka: no usable key")
	// ErrTooLarge is the class of rejects for a record larger than a topic
	// it would be written to takes (its max.message.bytes). Such a record
	// goes to [Options.RejectsTopic], or is dropped and counted.
	ErrTooLarge = errors.New("kafka: record too large")
	// ErrFenced is returned by [Consumer.Run] when another member joined
	// the group with this instance's [Options.InstanceID]: two instances
	// share an ID that must be unique.
	ErrFenced = errors.New("kafka: fenced: another member joined with this instance ID")
	// ErrTxn wraps a transaction that could not be ended. It ends the
	// session, which [Consumer.Run] logs and follows with a new one; Run
	// does not return it.
	ErrTxn = errors.New("kafka: transaction failed")
)

// ErrCheckpoint marks an engine checkpoint this package did not write. A
// partition whose state holds one is rebuilt (rule 3 of the package doc);
// the error is logged, not returned.
var ErrCheckpoint = errors.New("kafka: malformed engine checkpoint")
