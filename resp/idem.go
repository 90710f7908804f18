package resp

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
)

// Idempotency keys with stored results (dedup.Engine.Begin), for services
// that already talk to Redis:
//
//	DEDUP.BEGIN table key fingerprint lease-ms   claim key, or say who has it
//	DEDUP.COMPLETE table key token result        store the result, end the claim
//	DEDUP.RELEASE table key token                give the key back (the work failed)
//	DEDUP.RENEW table key token lease-ms         extend the claim's lease to lease-ms from now
//	DEDUP.GET table key [fingerprint]            what BEGIN would say, without claiming
//
// BEGIN answers an array whose first element is the state:
//
//	new <token> <expires-ms>          the caller owns the key; expires-ms is when it leaves the window (Unix ms)
//	inprogress <lease-left-ms>        another caller owns it
//	completed <result> <expires-ms>   the stored result
//	mismatch                          the key came with another fingerprint
//
// GET answers the same, with "absent" where BEGIN would claim the key. An
// empty fingerprint is not checked. Claims, results and releases are
// durable (fsynced) before their reply, whatever --fsync says.
// COMPLETE, RELEASE and RENEW with a token that no longer owns the key
// answer -LEASELOST. A lease that is not positive or longer than the
// table's window answers -BADLEASE, a key longer than the table holds
// -KEYTOOLARGE, a result too large -RESULTTOOLARGE: errors no retry
// passes, apart from the store's failures (-ERR).

func init() {
	register(
		command{name: "dedup.begin", arity: 5, table: tableCreate, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBegin},
		command{name: "dedup.complete", arity: 5, table: tableExisting, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdComplete},
		command{name: "dedup.release", arity: 4, table: tableExisting, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdRelease},
		command{name: "dedup.renew", arity: 5, table: tableExisting, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdRenew},
		command{name: "dedup.get", arity: -3, table: tableIfExists, flags: flagReadonly, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdIdemGet},
	)
}

// idemTimeout bounds how long a call waits for another call on the same
// key (a claim being written).
const idemTimeout = 10 * time.Second

// withEngine runs fn on t's engine unless t is closed.
func (t *table) withEngine(fn func(e *dedup.Engine) error) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errTableClosed
	}
	return fn(t.eng)
}

// cmdBegin serves DEDUP.BEGIN table key fingerprint lease-ms.
func (s *Server) cmdBegin(c *conn, t *table, args [][]byte) {
	lease, ok := parseLease(c, args[4])
	if !ok {
		return
	}
	var cl dedup.Claim
	var err error
	err = t.withEngine(func(e *dedup.Engine) error {
		ctx, cancel := context.WithTimeout(context.Background(), idemTimeout)
		defer cancel()
		cl, err = e.Begin(ctx, args[2], args[3], lease)
		return err
	})
	if err != nil {
		writeIdemErr(c, err)
		return
	}
	writeClaim(c, cl)
}

// cmdIdemGet serves DEDUP.GET table key [fingerprint].
func (s *Server) cmdIdemGet(c *conn, t *table, args [][]byte) {
	if len(args) > 4 {
		c.WriteError(errArgs("dedup.get"))
		return
	}
	if t == nil {
		writeClaim(c, dedup.Claim{State: dedup.ClaimAbsent})
		return
	}
	var fp []byte
	if len(args) == 4 {
		fp = args[3]
	}
	var cl dedup.Claim
	err := t.withEngine(func(e *dedup.Engine) error {
		ctx, cancel := context.WithTimeout(context.Background(), idemTimeout)
		defer cancel()
		var err error
		cl, err = e.Lookup(ctx, args[2], fp)
		return err
	})
	if err != nil {
		writeIdemErr(c, err)
		return
	}
	writeClaim(c, cl)
}

// cmdComplete serves DEDUP.COMPLETE table key token result.
func (s *Server) cmdComplete(c *conn, t *table, args [][]byte) {
	s.endClaim(c, t, args, func(ctx context.Context, e *dedup.Engine, tok dedup.Token) error {
		return e.Complete(ctx, args[2], tok, args[4])
	})
}

// cmdRelease serves DEDUP.RELEASE table key token.
func (s *Server) cmdRelease(c *conn, t *table, args [][]byte) {
	s.endClaim(c, t, args, func(ctx context.Context, e *dedup.Engine, tok dedup.Token) error {
		return e.Release(ctx, args[2], tok)
	})
}

// cmdRenew serves DEDUP.RENEW table key token lease-ms.
func (s *Server) cmdRenew(c *conn, t *table, args [][]byte) {
	lease, ok := parseLease(c, args[4])
	if !ok {
		return
	}
	s.endClaim(c, t, args, func(ctx context.Context, e *dedup.Engine, tok dedup.Token) error {
		return e.Renew(ctx, args[2], tok, lease)
	})
}

// parseLease reads a lease-ms argument, or answers why it is not one.
func parseLease(c *conn, arg []byte) (time.Duration, bool) {
	ms, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil || ms <= 0 || ms > int64(time.Duration(1<<62)/time.Millisecond) {
		c.WriteError("ERR lease-ms must be a positive integer (milliseconds), got " + quote(arg))
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// writeIdemErr answers the error of an idempotency call, with a code of
// its own for the errors no retry passes.
func writeIdemErr(c *conn, err error) {
	code := ""
	switch {
	case errors.Is(err, dedup.ErrLeaseLost):
		code = "LEASELOST "
	case errors.Is(err, dedup.ErrBadLease):
		code = "BADLEASE "
	case errors.Is(err, dedup.ErrKeyTooLarge):
		code = "KEYTOOLARGE "
	case errors.Is(err, dedup.ErrResultTooLarge):
		code = "RESULTTOOLARGE "
	default:
		writeErr(c, err)
		return
	}
	c.WriteError(code + strings.NewReplacer("\r", " ", "\n", " ").Replace(err.Error()))
}

func (s *Server) endClaim(c *conn, t *table, args [][]byte, end func(context.Context, *dedup.Engine, dedup.Token) error) {
	tok, err := dedup.ParseToken(string(args[3]))
	if err != nil {
		c.WriteError("ERR token " + quote(args[3]) + ": " + err.Error())
		return
	}
	err = t.withEngine(func(e *dedup.Engine) error {
		ctx, cancel := context.WithTimeout(context.Background(), idemTimeout)
		defer cancel()
		return end(ctx, e, tok)
	})
	if err != nil {
		writeIdemErr(c, err)
		return
	}
	c.WriteString("OK")
}

// writeClaim writes a claim as an array whose first element is its state.
func writeClaim(c *conn, cl dedup.Claim) {
	switch cl.State {
	case dedup.ClaimNew:
		c.WriteArray(3)
		c.WriteBulkString("new")
		c.WriteBulkString(cl.Token.String())
		c.WriteInt64(cl.Expires.UnixMilli())
	case dedup.ClaimInProgress:
		c.WriteArray(2)
		c.WriteBulkString("inprogress")
		c.WriteInt64(max(1, cl.LeaseLeft.Milliseconds()))
	case dedup.ClaimCompleted:
		c.WriteArray(3)
		c.WriteBulkString("completed")
		c.WriteBulk(cl.Result)
		c.WriteInt64(cl.Expires.UnixMilli())
	case dedup.ClaimMismatch:
		c.WriteArray(1)
		c.WriteBulkString("mismatch")
	default:
		c.WriteArray(1)
		c.WriteBulkString("absent")
	}
}
