// Package observeretry finishes an ObserveBatch that met the engine's
// bound on keys in flight, by committing and observing again what is left:
// the one rule the RESP server and the benchmark targets share.
package observeretry

import (
	"errors"

	"github.com/streamdedup/dedup"
)

// Finish finishes an observation of keys that failed with err, the
// verdicts given so far in out and the entries not observed 0 (as
// [dedup.Engine.ObserveBatch] leaves them). While err is
// [dedup.ErrTooManyInFlight] it commits (calling committed after each
// commit, if not nil) and observes again only the entries still 0,
// keeping every verdict given: observing a key given New again would
// answer it InFlight, or, once the commit made it durable, Duplicate, and
// a first sighting would be dropped. It stops when every entry has its
// verdict (nil), when a pass observes nothing (on an ExplicitDone engine a
// commit frees only the keys marked Done: ErrTooManyInFlight), or at
// another error, a commit's included, which it returns.
func Finish(eng *dedup.Engine, keys [][]byte, out []dedup.Verdict, err error, committed func()) error {
	var rest [][]byte
	var idx []int
	var sub []dedup.Verdict
	for errors.Is(err, dedup.ErrTooManyInFlight) {
		if cerr := eng.Commit(nil); cerr != nil {
			return cerr
		}
		if committed != nil {
			committed()
		}
		rest, idx = rest[:0], idx[:0]
		for i, v := range out[:len(keys)] {
			if v == 0 {
				rest = append(rest, keys[i])
				idx = append(idx, i)
			}
		}
		if len(rest) == 0 {
			return nil
		}
		if cap(sub) < len(rest) {
			sub = make([]dedup.Verdict, len(rest))
		}
		sub = sub[:len(rest)]
		err = eng.ObserveBatch(rest, sub)
		progress := false
		for j, i := range idx {
			if sub[j] != 0 {
				out[i], progress = sub[j], true
			}
		}
		if !progress {
			break
		}
	}
	return err
}
