package rotate

import "errors"

// ErrWindowOutOfRange is returned by [Ring.SetWindow] for a window outside
// [Options.Window, Options.MaxWindow], and by [Schedule.Preview] for one
// that is not positive.
var ErrWindowOutOfRange = errors.New("rotate: window out of range")
