package dedup

import (
	"errors"
	"fmt"
)

// Done says that key, observed New by the caller, is processed: under
// [Options.ExplicitDone] the next [Engine.Commit] (or
// [Engine.CommitThrough] through a [Barrier] taken after Done returns)
// makes it durable. Until Done the key stays in flight across commits and
// [Engine.Forget] can release it; after Done, Forget returns
// ErrAlreadyDone. Done returns ErrNotInFlight for a key not in flight
// (never observed New, forgotten, or committed), ErrAlreadyDone for a key
// Done twice, and ErrNoExplicitDone on an engine opened without
// ExplicitDone.
func (e *Engine) Done(key []byte) error {
	if err := e.usable(); err != nil {
		return err
	}
	if !e.opts.ExplicitDone {
		return ErrNoExplicitDone
	}
	if err := e.checkKey(key); err != nil {
		return err
	}
	h := e.hash(key)
	s := e.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return e.done(s, h, key)
}

// DoneBatch is [Engine.Done] for every key of keys. Every key is checked
// first: a nil, empty or oversized entry fails the whole batch, naming its
// index, and no key is Done. Otherwise every key in flight and not yet
// Done is Done, and the error joins, naming each index, the keys that were
// not in flight or were Done already.
func (e *Engine) DoneBatch(keys [][]byte) error {
	if err := e.usable(); err != nil {
		return err
	}
	if !e.opts.ExplicitDone {
		return ErrNoExplicitDone
	}
	for i, k := range keys {
		if err := e.checkKey(k); err != nil {
			return wrap(err, "DoneBatch entry %d", i)
		}
	}
	var errs []error
	var s *shard
	defer func() {
		if s != nil {
			s.mu.Unlock()
		}
	}()
	for i, k := range keys {
		h := e.hash(k)
		// Runs of keys of one shard take its lock once.
		if next := e.shardOf(h); next != s {
			if s != nil {
				s.mu.Unlock()
			}
			s = next
			s.mu.Lock()
		}
		if s.closed {
			return ErrClosed
		}
		if err := e.done(s, h, k); err != nil {
			errs = append(errs, wrap(err, "DoneBatch entry %d", i))
		}
	}
	return errors.Join(errs...)
}

// done moves key (hash h) from s's undone keys to its keys in flight, of
// the current epoch: a Barrier taken after Done returns covers it.
func (e *Engine) done(s *shard, h uint64, key []byte) error {
	gen, ok := s.undone.remove(h, key, e.exactMode)
	if !ok {
		if s.doneInFlight(h, key, e.exactMode) {
			return fmt.Errorf("%w: Done twice", ErrAlreadyDone)
		}
		return ErrNotInFlight
	}
	s.undone.compact()
	s.rollEpoch(e.epoch.Load())
	s.inflight.add(h, key, gen, e.exactMode)
	return nil
}
