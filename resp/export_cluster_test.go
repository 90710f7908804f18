package resp

// SetMoveHook sets the function called at each step of a slot range
// move (tests only).
func SetMoveHook(f func(step string)) { moveHook = f }
