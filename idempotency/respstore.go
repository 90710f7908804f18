package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
)

// RESPStore is a [Store] on a table of a `dedup serve`, over its
// idempotency commands (DEDUP.BEGIN, COMPLETE, RELEASE, RENEW), so that
// any number of processes (replicas of one API, several `dedup proxy`)
// share one state: one run per key across them all, a 409 at every
// process while the key runs, a 422 at every process for the key with
// another request. The server makes each claim and result durable before
// it answers.
//
// A call that cannot reach the server fails (the middleware answers 503,
// and runs nothing); a claim whose process dies, or loses the server for
// longer than its lease, lapses with its lease. Errors that no retry
// passes come back as the engine's: [dedup.ErrLeaseLost],
// [dedup.ErrBadLease], [dedup.ErrKeyTooLarge], [dedup.ErrResultTooLarge].
type RESPStore struct {
	c     redis.UniversalClient
	table string
}

// NewRESPStore returns a [Store] on table of the `dedup serve` c talks to;
// the table is created with the server's defaults at its first claim
// unless DEDUP.RESERVE made it first. The caller keeps c and closes it.
func NewRESPStore(c redis.UniversalClient, table string) *RESPStore {
	return &RESPStore{c: c, table: table}
}

// Begin claims key by DEDUP.BEGIN.
func (s *RESPStore) Begin(ctx context.Context, key, fingerprint []byte, lease time.Duration) (dedup.Claim, error) {
	v, err := s.c.Do(ctx, "DEDUP.BEGIN", s.table, key, fingerprint, leaseMS(lease)).Slice()
	if err != nil {
		return dedup.Claim{}, s.err("DEDUP.BEGIN", err)
	}
	c, ok := parseClaim(v)
	if !ok {
		return dedup.Claim{}, fmt.Errorf("%w: DEDUP.BEGIN %s answered %v", ErrBadReply, s.table, v)
	}
	return c, nil
}

// Complete stores result by DEDUP.COMPLETE.
func (s *RESPStore) Complete(ctx context.Context, key []byte, token dedup.Token, result []byte) error {
	return s.err("DEDUP.COMPLETE", s.c.Do(ctx, "DEDUP.COMPLETE", s.table, key, token.String(), result).Err())
}

// Release gives key back by DEDUP.RELEASE.
func (s *RESPStore) Release(ctx context.Context, key []byte, token dedup.Token) error {
	return s.err("DEDUP.RELEASE", s.c.Do(ctx, "DEDUP.RELEASE", s.table, key, token.String()).Err())
}

// Renew extends the claim's lease by DEDUP.RENEW.
func (s *RESPStore) Renew(ctx context.Context, key []byte, token dedup.Token, lease time.Duration) error {
	return s.err("DEDUP.RENEW", s.c.Do(ctx, "DEDUP.RENEW", s.table, key, token.String(), leaseMS(lease)).Err())
}

// AwaitKey reports false: the server tells no one when a claim ends, so
// the middleware asks Begin again until it does.
func (s *RESPStore) AwaitKey(ctx context.Context, key []byte) (bool, error) { return false, nil }

// leaseMS is lease in whole milliseconds, at least 1.
func leaseMS(lease time.Duration) int64 { return max(1, lease.Milliseconds()) }

// err maps the server's error codes onto the engine's errors.
func (s *RESPStore) err(cmd string, err error) error {
	if err == nil {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, c := range []struct {
			code string
			err  error
		}{{"LEASELOST ", dedup.ErrLeaseLost}, {"BADLEASE ", dedup.ErrBadLease}, {"KEYTOOLARGE ", dedup.ErrKeyTooLarge}, {"RESULTTOOLARGE ", dedup.ErrResultTooLarge}} {
			if strings.HasPrefix(msg, c.code) {
				return fmt.Errorf("%w: %s %s: %s", c.err, cmd, s.table, msg)
			}
		}
	}
	return fmt.Errorf("%w: %s %s: %w", ErrStoreUnreachable, cmd, s.table, err)
}

// parseClaim reads the array DEDUP.BEGIN answers.
func parseClaim(v []any) (dedup.Claim, bool) {
	if len(v) == 0 {
		return dedup.Claim{}, false
	}
	state, _ := v[0].(string)
	ms := func(i int) (int64, bool) {
		if i >= len(v) {
			return 0, false
		}
		n, ok := v[i].(int64)
		return n, ok
	}
	switch state {
	case "new":
		if len(v) != 3 {
			return dedup.Claim{}, false
		}
		tok, _ := v[1].(string)
		t, err := dedup.ParseToken(tok)
		exp, ok := ms(2)
		if len(v) != 3 || err != nil || !ok {
			return dedup.Claim{}, false
		}
		return dedup.Claim{State: dedup.ClaimNew, Token: t, Expires: time.UnixMilli(exp)}, true
	case "inprogress":
		left, ok := ms(1)
		if len(v) != 2 || !ok {
			return dedup.Claim{}, false
		}
		return dedup.Claim{State: dedup.ClaimInProgress, LeaseLeft: time.Duration(left) * time.Millisecond}, true
	case "completed":
		if len(v) != 3 {
			return dedup.Claim{}, false
		}
		res, ok1 := v[1].(string)
		exp, ok2 := ms(2)
		if len(v) != 3 || !ok1 || !ok2 {
			return dedup.Claim{}, false
		}
		return dedup.Claim{State: dedup.ClaimCompleted, Result: []byte(res), Expires: time.UnixMilli(exp)}, true
	case "mismatch":
		return dedup.Claim{State: dedup.ClaimMismatch}, len(v) == 1
	}
	return dedup.Claim{}, false
}
