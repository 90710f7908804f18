package dedup

// Internals of snapshot.go and restore.go that the external tests pin.

// LogTruncatedThrough returns the commit sequence through which e's commit
// log was truncated, as recorded in the store (0: never).
func LogTruncatedThrough(e *Engine) (uint64, error) { return e.logTruncatedThrough() }

// LogPairs returns the number of (generation, hash) pairs e's commit log
// still holds.
func LogPairs(e *Engine) (int, error) {
	n := 0
	err := e.store.ScanLog(0, func(_, _, _ uint64) error { n++; return nil })
	return n, err
}

// LastCommitSeq returns the sequence number of e's last commit.
func LastCommitSeq(e *Engine) uint64 {
	e.cpMu.Lock()
	defer e.cpMu.Unlock()
	return e.commitSeq
}
