package stream

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Event time for dedup filter: --time-field names where each line's time
// is, and the engine's window runs on those times (dedup.Options.EventTime)
// instead of the wall clock.
//
// A time is a number of seconds, milliseconds, microseconds or
// nanoseconds since the Unix epoch, or an RFC 3339 string. --time-unit
// names the unit of numbers; auto (the default) decides by magnitude:
// below 1e11 seconds (up to the year 5138), below 1e14 milliseconds
// (from March 1973), below 1e17 microseconds, nanoseconds above. A
// millisecond time before March 1973 therefore needs --time-unit ms.

// TimeConfig says where a line's event time is, as the flags of dedup
// filter do (its errors name them).
type TimeConfig struct {
	// Field is a JSON path, or a field number with Format lines
	// (--time-field); "" runs the window on the wall clock.
	Field string
	// Unit is the unit of numeric times: s, ms, us, ns, or auto (by
	// magnitude) (--time-unit).
	Unit string
}

// timeUnits maps --time-unit to nanoseconds per unit; auto is 0.
var timeUnits = map[string]int64{"auto": 0, "s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1}

// setTime adds the event time of cfg to x; its errors are usage errors.
func (x *Keyer) setTime(cfg TimeConfig, delim string) error {
	if cfg.Field == "" {
		if cfg.Unit != "auto" && cfg.Unit != "" {
			return fmt.Errorf("--time-unit goes with --time-field")
		}
		return nil
	}
	unit, ok := timeUnits[cfg.Unit]
	if !ok {
		return fmt.Errorf("--time-unit %q: want auto, s, ms, us or ns", cfg.Unit)
	}
	x.timed, x.timeUnit, x.timeName = true, unit, cfg.Field
	if x.mode == modeJSON {
		p, err := parsePaths(cfg.Field)
		if err != nil || len(p) != 1 {
			return fmt.Errorf("--time-field %q: want one dotted JSON path", cfg.Field)
		}
		x.nkeys = len(x.paths)
		x.paths = append(x.paths, p[0])
		x.scan = newJSONScanner(x.paths)
		return nil
	}
	n, err := strconv.Atoi(cfg.Field)
	if err != nil || n < 1 {
		return fmt.Errorf("--time-field %q: with --format lines, want a field number (from 1) of --delim separated fields", cfg.Field)
	}
	if delim == "" {
		return fmt.Errorf("--delim must not be empty")
	}
	x.timeField, x.timeDelim = n, []byte(delim)
	return nil
}

// eventTime returns the time of line, after extract accepted it (the JSON
// scanner holds its values), in nanoseconds since the epoch.
func (x *Keyer) eventTime(line []byte) (int64, reject) {
	var raw []byte
	quoted := false
	if x.mode == modeJSON {
		raw = x.scan.vals[x.nkeys]
		if raw == nil {
			return 0, reject{code: rejMissingTime}
		}
		if raw[0] == '"' {
			s, ok := unquoteJSON(raw[1 : len(raw)-1])
			if !ok {
				return 0, reject{code: rejBadTime, text: clip(raw)}
			}
			raw, quoted = s, true
		}
	} else {
		raw = trimCR(line)
		for i := 1; i < x.timeField; i++ {
			j := bytes.Index(raw, x.timeDelim)
			if j < 0 {
				return 0, reject{code: rejMissingTime}
			}
			raw = raw[j+len(x.timeDelim):]
		}
		if j := bytes.Index(raw, x.timeDelim); j >= 0 {
			raw = raw[:j]
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			return 0, reject{code: rejMissingTime}
		}
	}
	ns, ok := parseEventTime(raw, quoted, x.timeUnit)
	if !ok {
		return 0, reject{code: rejBadTime, text: clip(raw)}
	}
	return ns, reject{}
}

// parseEventTime reads raw as a number of unit (0: by magnitude) since the
// epoch, or, if quoted or not a number, as RFC 3339. Times before the
// epoch or past 2262 are refused.
func parseEventTime(raw []byte, quoted bool, unit int64) (int64, bool) {
	s := string(raw)
	if !quoted || looksNumeric(s) {
		if ns, ok := parseEpochNumber(s, unit); ok {
			return ns, true
		}
		if !quoted && looksNumeric(s) {
			return 0, false
		}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Before(time.Unix(0, 0)) || t.Year() > 2262 {
		return 0, false
	}
	ns := t.UnixNano()
	return ns, ns >= 0
}

func looksNumeric(s string) bool {
	return s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))
}

// parseEpochNumber reads a JSON number of unit since the epoch.
func parseEpochNumber(s string, unit int64) (int64, bool) {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i < 0 {
			return 0, false
		}
		u := unit
		if u == 0 {
			u = unitByMagnitude(float64(i))
		}
		if i > math.MaxInt64/u {
			return 0, false
		}
		return i * u, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	u := unit
	if u == 0 {
		u = unitByMagnitude(f)
	}
	ns := f * float64(u)
	if ns >= math.MaxInt64 {
		return 0, false
	}
	return int64(ns), true
}

// unitByMagnitude is --time-unit auto: the unit of a time of magnitude v.
func unitByMagnitude(v float64) int64 {
	switch {
	case v < 1e11:
		return 1e9
	case v < 1e14:
		return 1e6
	case v < 1e17:
		return 1e3
	}
	return 1
}

// clip keeps the start of a bad time for its reject record.
func clip(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// describeTime names the time field for reject records.
func (x *Keyer) describeTime() string {
	if x.mode == modeJSON {
		return strconv.Quote(x.timeName)
	}
	return "field " + x.timeName
}

// timeText formats the time rejects.
func (r reject) timeText(x *Keyer) string {
	if r.code == rejMissingTime {
		return "missing time " + x.describeTime()
	}
	return fmt.Sprintf("bad time %s in %s: want a number of s, ms, us or ns since 1970 (--time-unit %s) or an RFC 3339 string",
		strconv.Quote(r.text), x.describeTime(), unitName(x.timeUnit))
}

func unitName(u int64) string {
	for _, k := range []string{"s", "ms", "us", "ns"} {
		if timeUnits[k] == u {
			return k
		}
	}
	return "auto"
}

// observeGroup observes keys [k0, k1) of b: at once on the wall clock, or
// with --time-field each at its own time (the engine observes them in runs
// that never cross a generation's span, each at its latest time, and its
// clock never moves back, so a late line is observed at the latest time
// seen).
func (f *Filter) observeGroup(b *batch, k0, k1 int) error {
	if !f.x.timed {
		return f.eng.ObserveBatch(b.keys[k0:k1], b.verdicts[k0:k1])
	}
	f.times = f.times[:0]
	for _, ns := range b.times[k0:k1] {
		f.times = append(f.times, time.Unix(0, ns))
	}
	return f.eng.ObserveBatchTimes(b.keys[k0:k1], f.times, b.verdicts[k0:k1])
}

// eventCommitDue reports whether the key of time t is half a window past
// the event time of the last commit it caused, and if so starts the next.
func (f *Filter) eventCommitDue(t int64) bool {
	if f.cmtAt == 0 {
		f.cmtAt = t
		return false
	}
	if t-f.cmtAt >= int64(f.window/2) {
		f.cmtAt = t
		return true
	}
	return false
}

// cutAtEventLimit ends the group [k0, k1) of b before the first key half a
// window past the last commit's event time.
func (f *Filter) cutAtEventLimit(b *batch, k0, k1 int) int {
	limit := f.cmtAt + int64(f.window/2)
	for j := k0 + 1; j < k1; j++ {
		if b.times[j] >= limit {
			return j
		}
	}
	return k1
}
