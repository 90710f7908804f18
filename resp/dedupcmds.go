package resp

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
)

// cmdObserve serves DEDUP.OBSERVE table key [key ...]: the engine's
// verdict per key, as a status reply: new, duplicate or in-flight. The
// keys answered new stay in flight until the table commits them
// (DEDUP.COMMIT, or the server's background commits) or DEDUP.FORGET
// releases them; DEDUP.OBSERVE itself never waits for a commit.
func (s *Server) cmdObserve(c *conn, t *table, args [][]byte) {
	keys := args[2:]
	out := make([]dedup.Verdict, len(keys))
	if err := t.observe(keys, out); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteArray(len(out))
	for _, v := range out {
		c.WriteString(v.String())
	}
}

// cmdForget serves DEDUP.FORGET table key [key ...]: releases keys in
// flight (their processing failed) and answers how many were.
func (s *Server) cmdForget(c *conn, t *table, args [][]byte) {
	if t == nil {
		c.WriteInt(0)
		return
	}
	n, err := t.forget(args[2:])
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteInt(n)
}

// cmdDone serves DEDUP.DONE table key [key ...] on a table reserved with
// EXPLICITDONE: marks keys observed New as processed, so that the next
// commit makes them durable, and answers how many were in flight and not
// Done yet. Under FsyncAlways the reply waits for that commit.
func (s *Server) cmdDone(c *conn, t *table, args [][]byte) {
	n, err := t.done(args[2:])
	if err != nil {
		writeErr(c, err)
		return
	}
	if n > 0 {
		s.needSync(c, t)
	}
	c.WriteInt(n)
}

// reserveUsage is the syntax of DEDUP.RESERVE, for its errors.
const reserveUsage = "DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE] [REFRESH]"

// cmdReserve serves DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r]
// [CAPACITY n] [EXPLICITDONE] [REFRESH]: BF.RESERVE with dedup's own
// options, each defaulting to the server's (--window, --fp, --rate over
// the window, --refresh). EXPLICITDONE gives the table per-key
// completion: its keys observed New stay in flight until DEDUP.DONE (or
// DEDUP.FORGET). REFRESH makes its window slide: a duplicate renews its
// key ([dedup.Options.Refresh]).
func (s *Server) cmdReserve(c *conn, t *table, args [][]byte) {
	e := s.cfg.Engine
	opts := TableOptions{
		Window:            e.Window,
		FalsePositiveRate: e.FalsePositiveRate,
		Probabilistic:     e.Probabilistic,
		Refresh:           e.Refresh,
	}
	var capacity int64
	seen := map[string]bool{}
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		if seen[opt] {
			c.WriteError("ERR " + opt + " given twice: " + reserveUsage)
			return
		}
		seen[opt] = true
		if opt == "EXPLICITDONE" {
			opts.ExplicitDone = true
			continue
		}
		if opt == "REFRESH" {
			opts.Refresh = true
			continue
		}
		if !optionValue(c, args, i, opt, reserveUsage, "WINDOW", "ERROR_RATE", "CAPACITY") {
			return
		}
		i++
		v := string(args[i])
		switch opt {
		case "WINDOW":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
				c.WriteError("ERR WINDOW " + quote(args[i]) + " is not a positive number of milliseconds")
				return
			}
			opts.Window = time.Duration(ms) * time.Millisecond
		case "ERROR_RATE":
			fp, err := strconv.ParseFloat(v, 64)
			if err != nil || !(fp > 0 && fp < 1) {
				c.WriteError("ERR ERROR_RATE " + quote(args[i]) + " is not between 0 and 1 (exclusive)")
				return
			}
			opts.FalsePositiveRate = fp
		case "CAPACITY":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				c.WriteError("ERR CAPACITY " + quote(args[i]) + " is not a positive integer")
				return
			}
			capacity = n
		}
	}
	// Sized like BF.RESERVE: CAPACITY keys over the window; without it,
	// the server's rate over this table's window.
	if capacity > 0 {
		opts.ExpectedRate = float64(capacity) / opts.Window.Seconds()
		opts.Capacity = uint64(capacity)
	} else {
		opts.ExpectedRate = e.ExpectedRate
		opts.Capacity = uint64(e.ExpectedRate * opts.Window.Seconds())
	}
	if err := s.reserve(string(args[1]), opts); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

// cmdCommit serves DEDUP.COMMIT table [checkpoint]: commits the table's
// keys in flight, with checkpoint, fsynced, then answers +OK.
func (s *Server) cmdCommit(c *conn, t *table, args [][]byte) {
	var cp []byte
	if len(args) == 3 {
		cp = args[2]
	}
	if err := t.commit(cp); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

// cmdCheckpoint serves DEDUP.CHECKPOINT table: the last committed
// checkpoint, nil if none.
func (s *Server) cmdCheckpoint(c *conn, t *table, args [][]byte) {
	cp, err := t.checkpoint()
	if err != nil {
		writeErr(c, err)
		return
	}
	if cp == nil {
		c.WriteNull()
		return
	}
	c.WriteBulk(cp)
}

// cmdStats serves DEDUP.STATS table: the engine's stats as a flat array
// of names and values.
func (s *Server) cmdStats(c *conn, t *table, args [][]byte) {
	st, err := t.stats()
	if err != nil {
		writeErr(c, err)
		return
	}
	kv := statsFields(t.opts, st)
	c.WriteMap(len(kv))
	for _, f := range kv {
		c.WriteBulkString(f.name)
		switch v := f.v.(type) {
		case uint64:
			c.WriteUint64(v)
		case int64:
			c.WriteInt64(v)
		case float64:
			c.WriteDouble(v)
		default:
			c.WriteBulkString(fmt.Sprint(v))
		}
	}
}

type field struct {
	name string
	v    any
}

// statsFields lists a table's options and stats for DEDUP.STATS and INFO.
func statsFields(o TableOptions, st dedup.Stats) []field {
	mode := "exact"
	if o.Probabilistic {
		mode = "probabilistic"
	}
	return []field{
		{"mode", mode},
		{"window", o.Window.String()},
		{"capacity", o.Capacity},
		{"false_positive_rate", o.FalsePositiveRate},
		{"explicit_done", b2i(o.ExplicitDone)},
		{"observed", st.Observed},
		{"new", st.New},
		{"duplicate", st.Duplicate},
		{"inflight", st.InFlightVerdicts},
		{"inflight_keys", st.InFlightKeys},
		{"keys", st.FilterKeys},
		{"filter_bytes", st.FilterBytes},
		{"generations", int64(st.Generations)},
		{"estimated_fp_rate", round4(st.EstimatedFPRate)},
		{"store_lookups", st.StoreLookups},
		{"false_positives", st.FalsePositives},
		{"commits", st.Commits},
		{"commit_errors", st.CommitErrors},
		{"committed_keys", st.CommittedKeys},
		{"commit_latency_mean_us", st.CommitLatencyMean.Microseconds()},
		{"commit_latency_max_us", st.CommitLatencyMax.Microseconds()},
		{"snapshots", st.Snapshots},
		{"disk_bytes", st.DiskBytes},
		{"restored_from", st.RestoredFrom},
		{"restored_keys", st.RestoredKeys},
		{"window_leaks_per_million", round4(st.WindowAdvice.LeaksPerMillion)},
		{"window_for_100_per_million_seconds", int64(st.WindowAdvice.WindowFor100.Seconds())},
		{"window_for_10_per_million_seconds", int64(st.WindowAdvice.WindowFor10.Seconds())},
		{"window_for_1_per_million_seconds", int64(st.WindowAdvice.WindowFor1.Seconds())},
		{"window_delay_p99_ms", st.WindowAdvice.DelayP99.Milliseconds()},
		{"window_horizon_seconds", int64(st.WindowAdvice.Horizon.Seconds())},
		{"window_advice_duplicates", st.WindowAdvice.Duplicates},
	}
}

// round4 keeps four significant digits of an estimate; NaN reads 0.
func round4(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if math.IsNaN(r) {
		return 0
	}
	return r
}

// b2i is 1 for true, as Redis answers flags.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
