package dedup_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// The child process of TestProcessCrash is this test binary, re-executed
// with childEnv set: TestReliabilityCrashChild then runs the workload
// instead of returning at once.
const childEnv = "DEDUP_RELIABILITY_CHILD"

func childOptions(dir string, prob bool, snap time.Duration) Options {
	return Options{Dir: dir, Probabilistic: prob, Window: time.Hour, Generations: 4, Shards: 4,
		ExpectedRate: 2000, SnapshotInterval: snap}
}

// childKey is key k of commit c of round r.
func childKey(r, c, k int) string { return fmt.Sprintf("r%d-c%d-k%d", r, c, k) }

// childKeys is the number of keys of commit c.
func childKeys(c int) int { return 5 + (c*37)%60 }

// TestReliabilityCrashChild is the child of TestProcessCrash: it observes
// keys and commits in a loop, printing "C <round> <commit>" after each
// Commit returns, until it is killed.
func TestReliabilityCrashChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	dir := os.Getenv("DEDUP_CHILD_DIR")
	round, _ := strconv.Atoi(os.Getenv("DEDUP_CHILD_ROUND"))
	prob := os.Getenv("DEDUP_CHILD_PROB") == "1"
	snapMs, _ := strconv.Atoi(os.Getenv("DEDUP_CHILD_SNAP_MS"))
	e, err := Open(childOptions(dir, prob, time.Duration(snapMs)*time.Millisecond))
	if err != nil {
		fmt.Printf("ERR open: %v\n", err)
		os.Exit(3)
	}
	for c := 0; ; c++ {
		for k := 0; k < childKeys(c); k++ {
			v, err := e.Observe([]byte(childKey(round, c, k)))
			if err == nil && prob && v == Duplicate {
				// A false positive, at the configured rate: never
				// committed, so the parent does not check it.
				fmt.Printf("D %s\n", childKey(round, c, k))
				continue
			}
			if err != nil || v != New {
				fmt.Printf("ERR observe %s: %v %v\n", childKey(round, c, k), v, err)
				os.Exit(3)
			}
		}
		if err := e.Commit(fmt.Appendf(nil, "%d:%d", round, c)); err != nil {
			fmt.Printf("ERR commit: %v\n", err)
			os.Exit(3)
		}
		fmt.Printf("C %d %d\n", round, c) // os.Stdout is unbuffered
		if c%7 == 6 {
			if err := e.Snapshot(); err != nil {
				fmt.Printf("ERR snapshot: %v\n", err)
				os.Exit(3)
			}
		}
	}
}

// TestProcessCrash runs the child on a real directory and SIGKILLs it at a
// random moment, round after round, reopening the state in this process
// each time: every key of every Commit the child reported as returned is
// Duplicate, Checkpoint is the last reported commit or a later one (the
// child may die between Commit and its print), every key up to the
// checkpoint's commit is Duplicate and, in exact mode, the keys of the
// commit after it are New.
func TestProcessCrash(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, tc := range []struct {
		prob   bool
		rounds int
	}{{false, 14}, {true, 6}} {
		t.Run(fmt.Sprintf("prob=%v", tc.prob), func(t *testing.T) {
			processCrash(t, tc.prob, tc.rounds)
		})
	}
}

func processCrash(t *testing.T, prob bool, rounds int) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	// lastCommit[round] is the last commit of that round found durable.
	lastCommit := map[int]int{}
	falsePos := map[string]bool{} // keys the child found Duplicate: false positives
	prevCP := ""
	for round := 0; round < rounds; round++ {
		snapMs := []int{0, 10, 40}[r.IntN(3)]
		cmd, stdout := startChild(t, "TestReliabilityCrashChild", childEnv+"=1", "DEDUP_CHILD_DIR="+dir,
			"DEDUP_CHILD_ROUND="+strconv.Itoa(round), "DEDUP_CHILD_SNAP_MS="+strconv.Itoa(snapMs),
			"DEDUP_CHILD_PROB="+map[bool]string{false: "0", true: "1"}[prob])
		var mu sync.Mutex
		reported := -1
		var lines []string
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				mu.Lock()
				lines = append(lines, line)
				if f := strings.Fields(line); len(f) == 3 && f[0] == "C" {
					c, _ := strconv.Atoi(f[2])
					reported = c
				} else if len(f) == 2 && f[0] == "D" {
					falsePos[f[1]] = true
				}
				mu.Unlock()
			}
		}()
		// Let it start (a few hundred ms under -race), then kill it at a
		// random moment of its loop.
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			n := len(lines)
			mu.Unlock()
			if n > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
		_ = cmd.Process.Kill() // SIGKILL
		<-done
		_ = cmd.Wait()
		for _, l := range lines {
			if strings.HasPrefix(l, "ERR") {
				t.Fatalf("round %d: child: %s", round, l)
			}
		}

		e, err := Open(childOptions(dir, prob, 0))
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		cp := string(e.Checkpoint())
		var cpRound, cpCommit int
		_, perr := fmt.Sscanf(cp, "%d:%d", &cpRound, &cpCommit)
		switch {
		case perr == nil && cpRound == round && cpCommit >= reported:
			lastCommit[round] = cpCommit // this round's last durable commit
		case reported < 0 && cp == prevCP:
			// Killed before its first commit was durable.
		default:
			t.Fatalf("round %d: Checkpoint %q; the child reported commit %d:%d as returned, the previous checkpoint was %q",
				round, cp, round, reported, prevCP)
		}
		prevCP = cp
		for rr := 0; rr <= round; rr++ {
			last, ok := lastCommit[rr]
			if !ok {
				continue
			}
			for c := 0; c <= last; c++ {
				for k := 0; k < childKeys(c); k++ {
					if rr < round && (k+c)%5 != round%5 {
						continue // earlier rounds were checked in full: a sample
					}
					key := childKey(rr, c, k)
					mu.Lock()
					fp := falsePos[key]
					mu.Unlock()
					if fp {
						continue
					}
					if v, err := e.Observe([]byte(key)); err != nil || v != Duplicate {
						t.Fatalf("round %d: key %s of commit %d:%d (checkpoint %q, reported %d): %v, %v; want Duplicate",
							round, key, rr, c, cp, reported, v, err)
					}
				}
			}
		}
		if !prob {
			// The commit after the checkpoint never returned: its keys are New.
			next := 0
			if c, ok := lastCommit[round]; ok {
				next = c + 1
			}
			for k := 0; k < childKeys(next); k++ {
				key := childKey(round, next, k)
				if v, err := e.Observe([]byte(key)); err != nil || v != New {
					t.Fatalf("round %d: key %s of the uncommitted commit %d: %v, %v; want New", round, key, next, v, err)
				}
			}
		}
		if err := e.Close(); err != nil { // drops what was just observed New
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %d reported commits (snapshots every %dms); checkpoint %q", round, reported+1, snapMs, cp)
	}
}
