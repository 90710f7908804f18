package dedup

import (
	"errors"
	"fmt"
)

// Done says that key, observed New by the caller, is processed: under
// [Options.ExplicitDone] the next [Engine.Commit] (or
// [Engine.CommitThrough] through a [Barrier] taken after Done returns)
// makes it durable. Until Done the key stays in flight across commits,
// [Engine.Observe] answers it [InFlight] and [Engine.Forget] can release
// it; after Done, Forget returns ErrAlreadyDone. Done returns
// ErrNotInFlight for a key not in flight (never observed New, forgotten,
// or committed), ErrAlreadyDone for a key Done twice, and
// ErrNoExplicitDone on an engine opened without ExplicitDone.
//
// From Done on, Observe answers the key [Duplicate], before the commit
// that makes it durable: no worker waits on a key whose work is done, so
// a pool that commits rarely never stalls. That is safe under the
// low-watermark rule of the package doc ("Worker pools"): if event X got
// New and was Done, and event Y of the same key then got Duplicate and
// was marked complete, and the commit that would have made the key
// durable never happens (a crash), then no commit that happened covered
// X's Done, so none had X complete, and Y completed after X's Done, so
// none had Y complete either: the durable watermark is below both, both
// are read again after the restart, and the first of them is New. The
// output of X lies past the durable output length and is truncated away.
// Under the same rule a commit that does happen covers X's Done, hence
// its key, before or with Y's completion.
func (e *Engine) Done(key []byte) error {
	if err := e.usable(); err != nil {
		return err
	}
	if !e.opts.ExplicitDone {
		return ErrNoExplicitDone
	}
	h, s, err := e.lockKey(key)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
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

// removeUndone takes key (hash h) out of s's keys not yet Done and
// returns its generation. A key not there is ErrNotInFlight, or
// ErrAlreadyDone (saying what) if it was Done.
func (s *shard) removeUndone(h uint64, key []byte, exactMode bool, what string) (uint64, error) {
	gen, ok := s.undone.remove(h, key, exactMode)
	if !ok {
		if s.doneInFlight(h, key, exactMode) {
			return 0, fmt.Errorf("%w: %s", ErrAlreadyDone, what)
		}
		return 0, ErrNotInFlight
	}
	s.undone.compact()
	return gen, nil
}

// done moves key (hash h) from s's undone keys to its keys in flight, of
// the current epoch: a Barrier taken after Done returns covers it.
func (e *Engine) done(s *shard, h uint64, key []byte) error {
	gen, err := s.removeUndone(h, key, e.exactMode, "Done twice")
	if err != nil {
		return err
	}
	s.rollEpoch(e.epoch.Load())
	s.inflight.add(h, key, gen, e.exactMode)
	return nil
}
