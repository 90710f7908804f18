package exact

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestTruncateLogDuringFlush: a truncation of the log while a flush has
// written its tables but not yet ingested them leaves no log record on
// disk once both are done, whatever their order: the flush's log table
// does not land after the excision (where its records, 8 bytes a key,
// would stay on disk until the next truncation, which a run's last
// snapshot never has).
func TestTruncateLogDuringFlush(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer mustClose(t, s)
	seq := commitRange(t, s, 1, 0, 5000, nil)
	truncated := make(chan error, 1)
	s.beforeIngest = func() {
		s.beforeIngest = nil
		go func() { truncated <- s.TruncateLog(seq) }()
		// Give the truncation the time to run here, if it can.
		select {
		case err := <-truncated:
			truncated <- err
		case <-time.After(300 * time.Millisecond):
		}
	}
	if err := s.flushAll(); err != nil {
		t.Fatal(err)
	}
	if err := <-truncated; err != nil {
		t.Fatal(err)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(0), UpperBound: logEnd})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	used, err := s.db.EstimateDiskUsage(logKey(0), logEnd)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || used != 0 {
		t.Fatalf("after TruncateLog(%d) during a flush: %d log records left in Pebble, %d bytes on disk; want none", seq, n, used)
	}
}
