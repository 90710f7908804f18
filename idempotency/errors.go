package idempotency

import "errors"

var (
	// ErrStoreUnreachable wraps the failure of a [RESPStore] call that did
	// not get an answer from the server (a connection refused or broken,
	// a timeout) or got one of its store's failures: the middleware
	// answers 503 and runs nothing.
	ErrStoreUnreachable = errors.New("idempotency: store unreachable")
	// ErrBadReply is a [RESPStore] call answered with something the
	// idempotency commands do not answer: the server is not a dedup
	// serve, say.
	ErrBadReply = errors.New("idempotency: unexpected reply from the store")
)
