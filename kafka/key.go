package kafka

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record headers the [Consumer] writes.
const (
	// RejectReasonHeader carries, on a record sent to [Options.RejectsTopic],
	// why it has no usable key.
	RejectReasonHeader = "dedup-reject-reason"
	// VerdictHeader carries, on a record sent to [Options.DupsTopic], the
	// engine's verdict ("duplicate", or "inflight" for a repeat within the
	// same transaction).
	VerdictHeader = "dedup-verdict"
)

// KeyFunc returns the dedup key of a record, or an error wrapping [ErrNoKey]
// that says why it has none (the text goes into [RejectReasonHeader]). The
// key may alias the record's memory; it must not be modified later. A
// KeyFunc must be safe for concurrent use: replays of newly assigned
// partitions run beside the main loop.
type KeyFunc func(r *kgo.Record) ([]byte, error)

// RecordKey uses the record's key; it is the default [Options.Key].
func RecordKey() KeyFunc {
	return func(r *kgo.Record) ([]byte, error) {
		if len(r.Key) == 0 {
			return nil, fmt.Errorf("%w: the record has no key", ErrNoKey)
		}
		return r.Key, nil
	}
}

// HeaderKey uses the value of the record's first header named name.
func HeaderKey(name string) KeyFunc {
	return func(r *kgo.Record) ([]byte, error) {
		for _, h := range r.Headers {
			if h.Key == name {
				if len(h.Value) == 0 {
					return nil, fmt.Errorf("%w: header %q is empty", ErrNoKey, name)
				}
				return h.Value, nil
			}
		}
		return nil, fmt.Errorf("%w: no header %q", ErrNoKey, name)
	}
}

// ParseKeyFrom parses the command's --key-from: "record-key" for
// [RecordKey], or "header:NAME" for [HeaderKey](NAME). Any other source is
// an error wrapping [ErrInvalidOptions].
func ParseKeyFrom(s string) (KeyFunc, error) {
	switch {
	case s == "record-key":
		return RecordKey(), nil
	case strings.HasPrefix(s, "header:") && len(s) > len("header:"):
		return HeaderKey(s[len("header:"):]), nil
	}
	return nil, fmt.Errorf("%w: key source must be record-key or header:NAME, got %q", ErrInvalidOptions, s)
}
