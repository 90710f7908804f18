package dedup

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
)

// Idempotency keys with stored results.
//
// An API that takes an idempotency key stores key -> result and answers a
// repeat of the key with the stored result instead of doing the work again.
// [Engine.Begin] reserves a key atomically and durably, [Engine.Complete]
// stores its result, [Engine.Release] gives it back when the work failed.
// A key's record goes through these states:
//
//	absent --Begin--> in progress (token, lease deadline) --Complete--> completed (result)
//	                       |  \--Release--> absent
//	                       \--lease passes, Begin--> in progress (new token)
//
// Every record lives under the generation of the key's first Begin and
// leaves with it: a key is remembered for the window ([Options.Window]),
// like the keys of [Engine.Observe], and is absent again afterwards. The
// records are in the exact store, so backups carry them and a restart keeps
// them; they need exact mode.
//
// The in-progress mark is durable (fsynced, shared with concurrent writers)
// before Begin returns ClaimNew: after a crash, a Begin of the key before
// its lease deadline gets ClaimInProgress, never a second ClaimNew; after
// the deadline the key may be claimed again and the work may run twice.
// Choose the lease above the slowest run of the work, and pass the key on to
// the systems the work calls so that they can protect themselves too.

// ClaimState is the answer of [Engine.Begin] for a key.
type ClaimState uint8

const (
	// ClaimNew: the key was absent (or its lease had passed); the caller
	// owns it under [Claim].Token and ends the claim with [Engine.Complete]
	// or [Engine.Release].
	ClaimNew ClaimState = iota + 1
	// ClaimInProgress: another caller owns the key; its lease ends in
	// [Claim].LeaseLeft.
	ClaimInProgress
	// ClaimCompleted: the key's work is done; [Claim].Result holds its
	// stored result.
	ClaimCompleted
	// ClaimMismatch: the key is in progress or completed with another
	// fingerprint: the same key was sent with another request.
	ClaimMismatch
	// ClaimAbsent: the key has no record ([Engine.Lookup] only; Begin
	// claims an absent key and answers ClaimNew).
	ClaimAbsent
)

// String returns the state's name: "new", "in progress", "completed",
// "mismatch" or "absent".
func (s ClaimState) String() string {
	switch s {
	case ClaimNew:
		return "new"
	case ClaimInProgress:
		return "in progress"
	case ClaimCompleted:
		return "completed"
	case ClaimMismatch:
		return "mismatch"
	case ClaimAbsent:
		return "absent"
	}
	return fmt.Sprintf("ClaimState(%d)", uint8(s))
}

// Claim is the answer of [Engine.Begin].
type Claim struct {
	State ClaimState
	// Token identifies the owner of a ClaimNew: [Engine.Complete] and
	// [Engine.Release] take it.
	Token Token
	// LeaseLeft is, for ClaimInProgress, the time until the owner's lease
	// ends and the key may be claimed again.
	LeaseLeft time.Duration
	// Result is, for ClaimCompleted, the stored result. The caller owns it.
	Result []byte
	// Expires is when the key leaves the window and its record with it (all
	// states but ClaimMismatch).
	Expires time.Time
}

// Token is the proof of ownership of a claimed key, made at random by
// [Engine.Begin]. Its String form is what [ParseToken] reads.
type Token [16]byte

// String returns the token as 32 lowercase hex digits.
func (t Token) String() string { return hex.EncodeToString(t[:]) }

// ParseToken reads a token written by [Token.String].
func ParseToken(s string) (Token, error) {
	var t Token
	if len(s) != 2*len(t) {
		return t, fmt.Errorf("%w: want %d hex digits, got %d characters", ErrBadToken, 2*len(t), len(s))
	}
	if _, err := hex.Decode(t[:], []byte(s)); err != nil {
		return t, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	return t, nil
}

// Begin claims key for the caller, or reports who has it. fingerprint
// identifies the request the key came with (a hash of its payload, say);
// a later Begin of the key with another fingerprint gets ClaimMismatch,
// checked before any stored result is returned. An empty fingerprint is
// not checked. lease bounds how long the claim holds if its owner never
// ends it (a crash): past it, the key may be claimed again. It must be
// positive and at most the window ([ErrBadLease]): the claim holds until
// its lease ends, across restarts, whatever generation it is in.
//
// For one key, among any number of concurrent Begin calls (from any number
// of goroutines) exactly one gets ClaimNew; the others get ClaimInProgress,
// ClaimMismatch, or ClaimCompleted once the owner completes. The claim is
// durable before Begin returns ClaimNew. ctx bounds the wait for another
// call on the same key; the store write itself is not interrupted.
func (e *Engine) Begin(ctx context.Context, key, fingerprint []byte, lease time.Duration) (Claim, error) {
	if lease <= 0 {
		return Claim{}, fmt.Errorf("%w, got %v", ErrBadLease, lease)
	}
	if lease > e.opts.Window {
		return Claim{}, fmt.Errorf("%w: %v is longer than the window, %v: a claim leaves with the window, and a caller that crashed could see its key run again before the lease ends", ErrBadLease, lease, e.opts.Window)
	}
	id, err := e.idemCheck(key)
	if err != nil {
		return Claim{}, err
	}
	if err := e.lockCommit(); err != nil {
		return Claim{}, err
	}
	defer e.lifecycle.RUnlock()
	digest := digestOf(fingerprint)
	t := &e.idem
	if o := t.owner(id); o != nil {
		// A claim of this process answers without a read.
		if left := time.Unix(0, o.deadline).Sub(e.opts.Now()); left > 0 {
			if !(record{digest: o.digest}).matches(digest) {
				return Claim{State: ClaimMismatch}, nil
			}
			return Claim{State: ClaimInProgress, LeaseLeft: left, Expires: e.timing.Expiry(o.gen)}, nil
		}
	}
	recs := e.records()
	// A completed record is final until its generation leaves the window:
	// it answers (a replay) without taking the key.
	if gen, val, ok, err := recs.GetRecord(id); err == nil && ok {
		if now := e.opts.Now(); gen >= e.timing.OldestLive(now) {
			if r, err := decodeRecord(val); err == nil && r.completed {
				return r.claim(digest, now, e.timing.Expiry(gen)), nil
			}
		}
	}
	release, err := t.acquire(ctx, id)
	if err != nil {
		return Claim{}, err
	}
	defer release()

	now := e.opts.Now()
	gen, val, ok, err := recs.GetRecord(id)
	if err != nil {
		return Claim{}, wrap(err, "begin: read record")
	}
	var r record
	if ok && gen >= e.timing.OldestLive(now) {
		if r, err = decodeRecord(val); err != nil {
			return Claim{}, wrap(err, "begin")
		}
		if c := r.claim(digest, now, e.timing.Expiry(gen)); c.State != 0 {
			return c, nil
		}
		// The lease passed: the key is claimed again, under the
		// generation of its first claim while that outlasts the new
		// lease, else under the current one (the claim must not leave
		// with its generation before its lease ends).
		if now.Add(lease).After(e.timing.Expiry(gen)) {
			gen = e.generationFor(now)
		}
	} else {
		gen = e.generationFor(now)
	}
	var tok Token
	if _, err := rand.Read(tok[:]); err != nil {
		return Claim{}, wrap(err, "begin: token")
	}
	nr := record{digest: digest, token: tok, deadline: now.Add(lease).UnixNano()}
	if err := recs.PutRecord(gen, id, nr.encode()); err != nil {
		return Claim{}, wrap(err, "begin: write record")
	}
	t.own(id, &owner{token: tok, digest: digest, deadline: nr.deadline, gen: gen, done: make(chan struct{})}, now.UnixNano())
	return Claim{State: ClaimNew, Token: tok, Expires: e.timing.Expiry(gen)}, nil
}

// Lookup reports what Begin would answer for key and fingerprint without
// claiming it: ClaimAbsent where Begin would claim the key (no record, or a
// lease that has passed), else ClaimInProgress, ClaimCompleted or
// ClaimMismatch as Begin would.
func (e *Engine) Lookup(ctx context.Context, key, fingerprint []byte) (Claim, error) {
	id, err := e.idemCheck(key)
	if err != nil {
		return Claim{}, err
	}
	if err := e.lockCommit(); err != nil {
		return Claim{}, err
	}
	defer e.lifecycle.RUnlock()
	release, err := e.idem.acquire(ctx, id)
	if err != nil {
		return Claim{}, err
	}
	defer release()
	now := e.opts.Now()
	gen, val, ok, err := e.records().GetRecord(id)
	if err != nil {
		return Claim{}, wrap(err, "lookup: read record")
	}
	if !ok || gen < e.timing.OldestLive(now) {
		return Claim{State: ClaimAbsent}, nil
	}
	r, err := decodeRecord(val)
	if err != nil {
		return Claim{}, wrap(err, "lookup")
	}
	c := r.claim(digestOf(fingerprint), now, e.timing.Expiry(gen))
	if c.State == 0 {
		c = Claim{State: ClaimAbsent}
	}
	return c, nil
}

// Complete stores result as the outcome of the key claimed under token and
// ends the claim: every later Begin of the key within the window gets
// ClaimCompleted with result (ClaimMismatch for another fingerprint). The
// result is durable when Complete returns nil. It fails with ErrLeaseLost
// if the key is no longer in progress under token, and with
// ErrResultTooLarge for a result over MaxResultSize bytes.
func (e *Engine) Complete(ctx context.Context, key []byte, token Token, result []byte) error {
	if len(result) > MaxResultSize {
		return fmt.Errorf("%w: %d bytes, MaxResultSize is %d", ErrResultTooLarge, len(result), MaxResultSize)
	}
	return e.endClaim(ctx, key, token, func(gen uint64, id recordID, r record) error {
		r.completed, r.result = true, result
		if err := e.records().PutRecord(gen, id, r.encode()); err != nil {
			return wrap(err, "complete: write record")
		}
		return nil
	})
}

// Release gives back the key claimed under token, because its work failed
// or was not done: the next Begin of the key gets ClaimNew. The release is
// durable when Release returns nil. It fails with ErrLeaseLost if the key is
// no longer in progress under token.
func (e *Engine) Release(ctx context.Context, key []byte, token Token) error {
	return e.endClaim(ctx, key, token, func(gen uint64, id recordID, _ record) error {
		if err := e.records().DeleteRecord(gen, id); err != nil {
			return wrap(err, "release: delete record")
		}
		return nil
	})
}

// AwaitKey waits until the claim a Begin of key reported in progress ends
// in this process (Complete, Release, or another Begin claiming it after
// its lease), or until ctx is done. It reports false at once if no caller of
// this process holds the key (the owner is another process, or was one
// before a restart): then only Begin, asked again later, tells when the
// claim ends.
func (e *Engine) AwaitKey(ctx context.Context, key []byte) (bool, error) {
	id, err := e.idemCheck(key)
	if err != nil {
		return false, err
	}
	done := e.idem.ownerDone(id)
	if done == nil {
		return false, nil
	}
	select {
	case <-done:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// endClaim runs end (Complete's write or Release's delete) on the record of
// key if it is in progress under token.
func (e *Engine) endClaim(ctx context.Context, key []byte, token Token, end func(gen uint64, id recordID, r record) error) error {
	return e.onClaim(ctx, key, token, func(gen uint64, id recordID, r record) error {
		if err := end(gen, id, r); err != nil {
			return err
		}
		e.idem.disown(id, token)
		return nil
	})
}

// onClaim runs fn on the record of key if it is in progress under token,
// with the key busy and the engine held open: a call racing Close
// finishes before the store closes, or gets ErrClosed.
func (e *Engine) onClaim(ctx context.Context, key []byte, token Token, fn func(gen uint64, id recordID, r record) error) error {
	id, err := e.idemCheck(key)
	if err != nil {
		return err
	}
	if err := e.lockCommit(); err != nil {
		return err
	}
	defer e.lifecycle.RUnlock()
	release, err := e.idem.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	gen, r, err := e.claimedBy(id, token)
	if err != nil {
		return err
	}
	return fn(gen, id, r)
}

// Renew extends the lease of the key claimed under token to lease from
// now, for an owner whose work outlasts the lease it claimed with: an
// owner that renews its claim while it works keeps the key in progress
// however long the work takes, and the lease still bounds how long the key
// stays in progress once the owner is gone (a crash, a lost connection to
// the store). lease must be positive and at most the window
// ([ErrBadLease]); a claim renewed past its generation's end moves to the
// current generation, so that it holds until the new lease ends. The new
// deadline is durable when Renew returns nil. Renew fails with
// ErrLeaseLost if the key is no longer in progress under token; an owner
// whose lease passed without another Begin claiming the key still renews
// it.
func (e *Engine) Renew(ctx context.Context, key []byte, token Token, lease time.Duration) error {
	if lease <= 0 || lease > e.opts.Window {
		return fmt.Errorf("%w: got %v, window %v", ErrBadLease, lease, e.opts.Window)
	}
	return e.onClaim(ctx, key, token, func(gen uint64, id recordID, r record) error {
		now := e.opts.Now()
		r.deadline = now.Add(lease).UnixNano()
		to := gen
		if now.Add(lease).After(e.timing.Expiry(gen)) {
			to = e.generationFor(now)
		}
		recs := e.records()
		if err := recs.PutRecord(to, id, r.encode()); err != nil {
			return wrap(err, "renew: write record")
		}
		if to != gen {
			// The store answers from the newest generation holding the
			// record: the claim is under to already; the old one goes.
			if err := recs.DeleteRecord(gen, id); err != nil {
				return wrap(err, "renew: delete the record of the claim's first generation")
			}
		}
		e.idem.renew(id, token, r.deadline, to)
		return nil
	})
}

// claimedBy returns the generation and record of id if it is in progress
// under token. The caller holds id busy.
func (e *Engine) claimedBy(id recordID, token Token) (uint64, record, error) {
	if o := e.idem.owner(id); o != nil && o.token == token {
		// Only this process's Begin wrote the record since, and it
		// would have replaced the owner.
		return o.gen, record{digest: o.digest, token: o.token, deadline: o.deadline}, nil
	}
	gen, val, ok, err := e.records().GetRecord(id)
	if err != nil {
		return 0, record{}, wrap(err, "read record")
	}
	if !ok || gen < e.timing.OldestLive(e.opts.Now()) {
		return 0, record{}, fmt.Errorf("%w: the key has no record (released, or out of the window)", ErrLeaseLost)
	}
	r, err := decodeRecord(val)
	if err != nil {
		return 0, record{}, err
	}
	switch {
	case r.completed:
		return 0, record{}, fmt.Errorf("%w: the key is completed", ErrLeaseLost)
	case r.token != token:
		return 0, record{}, fmt.Errorf("%w: the key is claimed under another token", ErrLeaseLost)
	}
	return gen, r, nil
}

// idemCheck validates key and the engine's mode and returns the key's
// record ID.
func (e *Engine) idemCheck(key []byte) (recordID, error) {
	if e.closed.Load() {
		return recordID{}, ErrClosed
	}
	if !e.exactMode {
		return recordID{}, ErrNeedsExact
	}
	if err := e.checkKey(key); err != nil {
		return recordID{}, err
	}
	return e.recordID(key), nil
}

// digestOf hashes a request fingerprint to the 16 bytes a record keeps;
// the zero digest stands for no fingerprint.
func digestOf(fingerprint []byte) [16]byte {
	var d [16]byte
	if len(fingerprint) > 0 {
		sum := sha256.Sum256(fingerprint)
		copy(d[:], sum[:])
		if d == ([16]byte{}) {
			d[0] = 1
		}
	}
	return d
}

// record is a key's idempotency record as the store holds it:
//
//	byte 0      format (1)
//	byte 1      state: 1 in progress, 2 completed
//	bytes 2-17  digest of the request fingerprint (zero: none)
//	bytes 18-33 owner token
//	bytes 34-41 lease deadline, Unix nanoseconds, big-endian
//	bytes 42-   result (completed)
type record struct {
	completed bool
	digest    [16]byte
	token     Token
	deadline  int64
	result    []byte
}

const (
	recordFormat     = 1
	recordHeaderSize = 42
)

// claim is the answer a live record gives a Begin with digest at now: zero
// if its lease has passed (the key may be claimed again).
func (r record) claim(digest [16]byte, now, expires time.Time) Claim {
	if !r.matches(digest) {
		return Claim{State: ClaimMismatch}
	}
	if r.completed {
		return Claim{State: ClaimCompleted, Result: r.result, Expires: expires}
	}
	if left := time.Unix(0, r.deadline).Sub(now); left > 0 {
		return Claim{State: ClaimInProgress, LeaseLeft: left, Expires: expires}
	}
	return Claim{}
}

func (r record) matches(digest [16]byte) bool {
	return r.digest == [16]byte{} || digest == [16]byte{} || r.digest == digest
}

func (r record) encode() []byte {
	b := make([]byte, recordHeaderSize, recordHeaderSize+len(r.result))
	b[0] = recordFormat
	b[1] = 1
	if r.completed {
		b[1] = 2
	}
	copy(b[2:18], r.digest[:])
	copy(b[18:34], r.token[:])
	binary.BigEndian.PutUint64(b[34:42], uint64(r.deadline))
	return append(b, r.result...)
}

// decodeRecord reads a record; its result is a part of b (GetRecord's
// copy, the caller's).
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < recordHeaderSize || b[0] != recordFormat || (b[1] != 1 && b[1] != 2) {
		return r, fmt.Errorf("%w: idempotency record of %d bytes with a bad header", ErrCorrupt, len(b))
	}
	r.completed = b[1] == 2
	copy(r.digest[:], b[2:18])
	copy(r.token[:], b[18:34])
	r.deadline = int64(binary.BigEndian.Uint64(b[34:42]))
	if r.completed {
		r.result = b[recordHeaderSize:]
	}
	return r, nil
}

// minSweep is the size of a shard's owners below which expired claims
// are left for their key's next Begin to replace.
const minSweep = 64
