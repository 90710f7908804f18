// Package errclass holds the error classes shared by every layer of dedup,
// so that one errors.Is test matches a class whichever layer reported it.
//
// The engine exports [ErrCorrupt] as dedup.ErrCorrupt. Each lower layer
// (filter, exact, snapshot) keeps a sentinel of its own, made with
// [Corrupt], that reads as that layer's error and matches ErrCorrupt too:
//
//	errors.Is(err, snapshot.ErrCorrupt) // a snapshot file is damaged
//	errors.Is(err, dedup.ErrCorrupt)    // some persisted state is damaged
package errclass

import "errors"

// ErrCorrupt is the corruption class: persisted state that fails its
// checks, in any layer.
var ErrCorrupt = errors.New("dedup: corrupt state")

// Corrupt returns a layer's corruption sentinel: its message is msg alone,
// and errors.Is matches it against itself and against [ErrCorrupt].
func Corrupt(msg string) error { return &classError{msg: msg, class: ErrCorrupt} }

// classError is a sentinel that belongs to a class.
type classError struct {
	msg   string
	class error
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }
