package stream

import (
	"fmt"
	"slices"
	"strings"
)

// rejectKey is a reason for rejecting a line: its code, and for the JSON
// key reasons the key path.
type rejectKey struct {
	code  rejectCode
	field int
}

// Most rejected: a run that read at least rejectMinLines lines and
// rejected more than half of them, or rejected every line it read, fails.
const rejectMinLines = 1000

// Verdict fails a run that rejected every line it read, or more than
// half of at least rejectMinLines: a wrong --key, --format or --field
// rejects everything, and must not pass for a success that wrote nothing.
// A resumed run (cron over a growing log) is judged with its job's counts,
// so that a run that read one stray line does not fail, and on its own
// only over rejectMinLines lines. Its one line names the commonest reason
// and a hint; it matches [ErrRejected]. The lines and keys done were
// committed all the same. Call it after [Filter.Close].
func (f *Filter) Verdict() error {
	ev, rej := f.pub.events.Load(), f.pub.rejects.Load()
	jobEv, jobRej := f.job.Counts.Events, f.job.Counts.Rejects
	mostly := func(ev, rej int64) bool { return ev >= rejectMinLines && 2*rej > ev }
	if ev == 0 || !(mostly(ev, rej) || (jobEv > 0 && (jobRej == jobEv || mostly(jobEv, jobRej)))) {
		return nil
	}
	var top rejectKey
	var n int64
	for k, c := range f.rejectWhy {
		if c > n || (c == n && (k.code < top.code || (k.code == top.code && k.field < top.field))) {
			top, n = k, c
		}
	}
	what := fmt.Sprintf("%d of %d lines were rejected", rej, ev)
	if rej == ev {
		what = fmt.Sprintf("every line was rejected (%d)", ev)
	}
	why := reject{code: top.code, field: top.field}.describe(f.x)
	if i := strings.Index(why, ": "); i >= 0 && top.code == rejNotJSON {
		why = why[:i] // "not JSON", without the first line's detail
	}
	return rejected(fmt.Errorf("%s, %d of them %s: %s", what, n, why, f.rejectHint(top)))
}

// rejectHint says what to check for lines rejected for reason k.
func (f *Filter) rejectHint(k rejectKey) string {
	x := f.x
	switch {
	case x.mode != modeJSON && k.code == rejEmptyKey:
		if x.mode == modeField {
			return fmt.Sprintf("check --field %d and --delim %q against a line of the input", x.field, x.delim)
		}
		return "the lines are empty"
	}
	switch k.code {
	case rejMissingKey, rejEmptyKey:
		keys := f.cfg.Keys.Key
		p := x.paths[k.field]
		// A one-member path beside dotted ones is most likely a member of
		// the same object: each path starts at the top.
		for _, q := range x.paths {
			if len(p) == 1 && len(q) > 1 {
				return fmt.Sprintf("check --key %s: each path starts at the top of the object, so %q inside %q is %s",
					keys, p[0], strings.Join(q[:len(q)-1], "."), strings.Join(append(slices.Clone(q[:len(q)-1]), p[0]), "."))
			}
		}
		return fmt.Sprintf("check --key %s against a line of the input: each path is dotted from the top of the object (a member b inside a is a.b)", keys)
	case rejNotJSON, rejNotObject, rejEmptyLine:
		return "is the input NDJSON, one JSON object per line? --format lines reads other text"
	case rejMissingField:
		return fmt.Sprintf("check --field %d and --delim %q against a line of the input", x.field, x.delim)
	case rejNoMatch:
		return fmt.Sprintf("check --regex %q against a line of the input", x.re)
	case rejKeyTooLarge:
		return fmt.Sprintf("check the key, or raise --max-key %d", x.maxKey)
	case rejLineTooLong:
		return fmt.Sprintf("is this line-delimited text? or raise --max-line %d", x.maxLine)
	}
	return "see the rejected lines"
}
