package resp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// madd sends batches BF.MADD (or DEDUP.OBSERVE) calls of per fresh keys on
// one connection, pipelined, and returns every reply in order.
func maddBatches(t *testing.T, c *redis.Client, cmd, table, prefix string, batches, per int) [][]any {
	t.Helper()
	var out [][]any
	const window = 5 // calls per pipeline
	for b0 := 0; b0 < batches; b0 += window {
		p := c.Pipeline()
		var cmds []*redis.Cmd
		for b := b0; b < min(b0+window, batches); b++ {
			args := make([]any, 0, per+2)
			args = append(args, cmd, table)
			for i := 0; i < per; i++ {
				args = append(args, fmt.Sprintf("%s:%d:%d", prefix, b, i))
			}
			cmds = append(cmds, p.Do(ctx, args...))
		}
		_, _ = p.Exec(ctx)
		for _, c := range cmds {
			v, err := c.Slice()
			if err != nil {
				out = append(out, []any{err})
				continue
			}
			out = append(out, v)
		}
	}
	return out
}

// inFlightBound is the engine's bound on keys in flight in these tests:
// 2^20 (the default) over 64, so that 20 calls of 1,000 keys cross it in
// the middle of a call (at 384 of its keys) as 1,200 calls of 1,000 cross
// the default.
const inFlightBound = 1 << 14

// TestBatchCrossingInFlightBoundAnswersFirstSightingsNew: BF.MADD calls of
// 1,000 never-seen keys on one connection cross the engine's bound on keys
// in flight under --fsync no, where only that bound commits. Every key is
// a first sighting and is answered 1 (DEDUP.OBSERVE: new), in both modes:
// the server commits and observes again only the keys the first pass left
// unobserved. A probabilistic table may answer a first sighting seen on a
// false positive: its target is 1e-6 here, so at most 2 of the 20,000
// (more happens about once in a million runs).
func TestBatchCrossingInFlightBoundAnswersFirstSightingsNew(t *testing.T) {
	const batches, per = 20, 1000
	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprintf("probabilistic=%v", prob), func(t *testing.T) {
			srv, addr := start(t, resp.Options{Fsync: resp.FsyncNo,
				Engine: dedup.Options{Window: time.Hour, ExpectedRate: 1000, Probabilistic: prob, MaxInFlight: inFlightBound, FalsePositiveRate: 1e-6}})
			c := client(t, addr)
			cmd, want := "BF.MADD", any(int64(1))
			if prob {
				cmd, want = "DEDUP.OBSERVE", any("new")
			}
			replies := maddBatches(t, c, cmd, "t", "k", batches, per)
			wrong := 0
			for b, r := range replies {
				if len(r) != per {
					t.Fatalf("batch %d: reply %v", b, r)
				}
				for i, v := range r {
					if v != want {
						if wrong < 3 {
							t.Logf("batch %d key %d: %v, want %v (a first sighting)", b, i, v, want)
						}
						wrong++
					}
				}
			}
			allowed := 0
			if prob {
				allowed = 2
			}
			if wrong > allowed {
				t.Errorf("%d first sightings of %d answered as seen", wrong, batches*per)
			}
			var st dedup.Stats
			for _, ts := range srv.Tables() {
				if ts.Name == "t" {
					st = ts.Stats
				}
			}
			if st.Observed != batches*per || st.New != uint64(batches*per-wrong) || st.Commits == 0 {
				t.Errorf("stats: observed %d new %d commits %d; want %d observed, all new, a commit", st.Observed, st.New, st.Commits, batches*per)
			}
		})
	}
}

// TestExplicitDoneBoundErrorLeavesNothingInFlight: on an EXPLICITDONE
// table a commit frees only keys marked Done, so the call that crosses the
// bound on keys in flight is answered an error, and none of its keys stays
// in flight: DEDUP.FORGET of that call releases nothing, and its keys are
// new to the next observer once room is made.
func TestExplicitDoneBoundErrorLeavesNothingInFlight(t *testing.T) {
	const batches, per = 20, 1000
	srv, addr := start(t, resp.Options{Fsync: resp.FsyncNo,
		Engine: dedup.Options{Window: time.Hour, ExpectedRate: 1000, Probabilistic: true, MaxInFlight: inFlightBound}})
	c := client(t, addr)
	if err := c.Do(ctx, "DEDUP.RESERVE", "w", "EXPLICITDONE").Err(); err != nil {
		t.Fatal(err)
	}
	replies := maddBatches(t, c, "DEDUP.OBSERVE", "w", "k", batches, per)
	failed := -1
	newKeys := 0
	for b, r := range replies {
		if len(r) == 1 {
			if err, ok := r[0].(error); ok {
				if !strings.Contains(err.Error(), "too many keys in flight") {
					t.Fatalf("batch %d: %v", b, err)
				}
				if failed < 0 {
					failed = b
				}
				continue
			}
		}
		for _, v := range r {
			if v == "new" {
				newKeys++
			}
		}
	}
	if failed < 0 {
		t.Fatal("no call crossed the bound on keys in flight")
	}
	var st dedup.Stats
	for _, ts := range srv.Tables() {
		if ts.Name == "w" {
			st = ts.Stats
		}
	}
	if st.InFlightKeys != int64(newKeys) {
		t.Errorf("%d keys in flight, want the %d answered new: a failed call left keys behind", st.InFlightKeys, newKeys)
	}
	args := []any{"DEDUP.FORGET", "w"}
	for i := 0; i < per; i++ {
		args = append(args, fmt.Sprintf("k:%d:%d", failed, i))
	}
	if n, err := c.Do(ctx, args...).Int(); err != nil || n != 0 {
		t.Errorf("DEDUP.FORGET of the failed call = %d, %v; want 0 (nothing left in flight)", n, err)
	}
}
