package dedup

import (
	"context"
	"sync"
)

// idemTable serialises the calls on each key and remembers the claims
// owned in this process. The zero value is ready.
type idemTable struct {
	shards  [64]idemShard
	commits recordCommitter
}

type idemShard struct {
	mu sync.Mutex
	// busy holds the keys a Begin, Complete or Release is reading or
	// writing; the channel closes when it is done.
	busy map[recordID]chan struct{}
	// owners holds the claims made by this process and not yet ended,
	// but for those whose lease passed, which own drops once the map
	// reaches sweepAt entries: a claim its caller abandoned (never
	// completed nor released, and its key never claimed again) does not
	// stay in memory for good.
	owners  map[recordID]*owner
	sweepAt int
}

// owner is a claim made in this process; done closes when it ends.
type owner struct {
	token    Token
	digest   [16]byte
	deadline int64
	gen      uint64
	done     chan struct{}
}

func (t *idemTable) shard(id recordID) *idemShard { return &t.shards[id[0]%64] }

// acquire makes id busy for the caller, waiting for other calls on it;
// release ends it.
func (t *idemTable) acquire(ctx context.Context, id recordID) (release func(), err error) {
	s := t.shard(id)
	for {
		s.mu.Lock()
		ch, ok := s.busy[id]
		if !ok {
			break
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.busy == nil {
		s.busy = make(map[recordID]chan struct{})
	}
	ch := make(chan struct{})
	s.busy[id] = ch
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.busy, id)
		s.mu.Unlock()
		close(ch)
	}, nil
}

// own records a claim made in this process at now (Unix ns), ending the
// one it replaces (a claim whose lease passed). When the shard's claims
// have doubled since the last sweep, those whose lease passed are ended
// and dropped too (their keys are read from the store if their owners
// call again): amortised, a constant cost per claim.
func (t *idemTable) own(id recordID, o *owner, now int64) {
	s := t.shard(id)
	var ended []*owner
	s.mu.Lock()
	if s.owners == nil {
		s.owners = make(map[recordID]*owner)
	}
	if old := s.owners[id]; old != nil {
		ended = append(ended, old)
	}
	s.owners[id] = o
	if len(s.owners) >= max(s.sweepAt, minSweep) {
		for k, x := range s.owners {
			if x.deadline < now {
				delete(s.owners, k)
				ended = append(ended, x)
			}
		}
		s.sweepAt = 2 * len(s.owners)
	}
	s.mu.Unlock()
	for _, x := range ended {
		close(x.done)
	}
}

// disown ends the claim of this process on id under token, if it has one.
func (t *idemTable) disown(id recordID, token Token) {
	s := t.shard(id)
	s.mu.Lock()
	o := s.owners[id]
	if o != nil && o.token == token {
		delete(s.owners, id)
	} else {
		o = nil
	}
	s.mu.Unlock()
	if o != nil {
		close(o.done)
	}
}

// renew sets the deadline and generation of the claim of this process on
// id under token, if it has one. An owner is never changed in place
// (owner's callers read it unlocked): a copy replaces it, with its done.
func (t *idemTable) renew(id recordID, token Token, deadline int64, gen uint64) {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.owners[id]; o != nil && o.token == token {
		n := *o
		n.deadline, n.gen = deadline, gen
		s.owners[id] = &n
	}
}

func (t *idemTable) owner(id recordID) *owner {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners[id]
}

func (t *idemTable) ownerDone(id recordID) <-chan struct{} {
	if o := t.owner(id); o != nil {
		return o.done
	}
	return nil
}
