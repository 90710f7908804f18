package dedup_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// The shape of a net/http handler under Options.ExplicitDone, with the
// output as the checkpoint: every request observes its key, appends its
// record to the output and calls Done under one lock, takes a Barrier and
// the output's length under it, then commits through the barrier outside
// it, concurrently with the other requests. Half of them pause between
// the lock and the commit, as a preemption could, so that their commits
// queue in another order than their barriers were taken.
const (
	hsGoroutines = 32
	hsRequests   = 100 // per goroutine
)

// TestConcurrentCommitThroughCoversItsRecord checks that no
// CommitThrough returns while the durable checkpoint is behind the record
// of its own request: the checkpoint written is the furthest barrier's,
// whatever order the commits queue in, and a later commit through an
// earlier barrier never moves it back. After a reopen the checkpoint
// covers every record and every key is Duplicate.
func TestConcurrentCommitThroughCoversItsRecord(t *testing.T) {
	dir := t.TempDir()
	opts := dedup.Options{Dir: dir, ExplicitDone: true}
	e, err := dedup.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var output []string
	var behind, worst atomic.Int64
	err = onGoroutines(hsGoroutines, func(g int) error {
		for r := range hsRequests {
			key := fmt.Appendf(nil, "g%02d-r%03d", g, r)
			if v, err := e.Observe(key); err != nil || v != dedup.New {
				return fmt.Errorf("Observe(%s) = %v, %v", key, v, err)
			}
			mu.Lock()
			output = append(output, string(key))
			record := len(output) // the output's length once this record is in
			err := e.Done(key)
			mu.Unlock()
			if err != nil {
				return err
			}
			mu.Lock()
			b := e.Barrier()
			length := len(output)
			mu.Unlock()
			if r%2 == 1 {
				time.Sleep(50 * time.Microsecond)
			}
			if err := e.CommitThrough(b, strconv.AppendInt(nil, int64(length), 10)); err != nil {
				return err
			}
			cp, err := strconv.Atoi(string(e.Checkpoint()))
			if err != nil {
				return err
			}
			if cp < record {
				behind.Add(1)
				for w := worst.Load(); int64(record-cp) > w && !worst.CompareAndSwap(w, int64(record-cp)); w = worst.Load() {
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := behind.Load(); n > 0 {
		t.Fatalf("%d of %d commits returned with the durable checkpoint behind their own record (by up to %d records)",
			n, hsGoroutines*hsRequests, worst.Load())
	}
	e = reopen(t, e, opts)
	if got, want := string(e.Checkpoint()), strconv.Itoa(len(output)); got != want {
		t.Fatalf("after reopen, Checkpoint = %s, want %s", got, want)
	}
	for _, k := range output {
		if v, err := e.Observe([]byte(k)); err != nil || v != dedup.Duplicate {
			t.Fatalf("after reopen, Observe(%s) = %v, %v; want Duplicate", k, v, err)
		}
	}
}

// hsChildEnv makes TestHandlerShapeChild run (its value is the state's
// directory).
const hsChildEnv = "DEDUP_HANDLER_SHAPE_DIR"

// hsInput is the requests every round sends, as clients retry what was not
// acknowledged: 3,200 requests of which about 25% repeat a key, half of
// those within the 32 requests before, so that two requests often hold one
// key at once.
func hsInput() []string {
	return keyStream{seed1: 27, seed2: 1, near: 12, span: 32, far: 13, format: "order-%05d"}.keys(hsGoroutines * hsRequests)
}

// TestHandlerShapeChild is the child of TestHandlerShapeCrash: the handler
// shape above on a real directory, with the output a file whose length is
// the checkpoint, truncated back to it at start. 1% of the processing
// attempts fail (Forget, then the request tries again); a request that
// gets InFlight tries again shortly, as a client told 409 with
// Retry-After would; Duplicate ends it. It prints "S <length>", "C
// <length>" after each commit returns and "END".
func TestHandlerShapeChild(t *testing.T) {
	dir := os.Getenv(hsChildEnv)
	if dir == "" {
		return
	}
	if err := hsRun(dir); err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	fmt.Println("END")
}

func hsRun(dir string) error {
	e, err := dedup.Open(dedup.Options{Dir: filepath.Join(dir, "state"), ExplicitDone: true})
	if err != nil {
		return err
	}
	var length int64
	if cp := e.Checkpoint(); cp != nil {
		if length, err = strconv.ParseInt(string(cp), 10, 64); err != nil {
			return fmt.Errorf("checkpoint %q: %w", cp, err)
		}
	}
	out, err := openOutput(dir, length)
	if err != nil {
		return err
	}
	fmt.Printf("S %d\n", length)
	input := hsInput()
	var mu sync.Mutex
	written := length
	err = onGoroutines(hsGoroutines, func(g int) error {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g)))
		for i := g; i < len(input); i += hsGoroutines {
			if err := hsRequest(e, r, &mu, out, &written, input[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return e.Close()
}

// hsRequest is one request of the handler shape.
func hsRequest(e *dedup.Engine, r *rand.Rand, mu *sync.Mutex, out *os.File, written *int64, id string) error {
	key := []byte(id)
	for {
		v, err := e.Observe(key)
		if err != nil {
			return err
		}
		switch v {
		case dedup.Duplicate:
			return nil
		case dedup.InFlight:
			time.Sleep(200 * time.Microsecond)
			continue
		}
		if r.IntN(100) == 0 {
			if err := e.Forget(key); err != nil {
				return fmt.Errorf("forget %s: %w", key, err)
			}
			continue
		}
		mu.Lock()
		n, err := out.WriteAt([]byte(id+"\n"), *written)
		*written += int64(n)
		if err == nil {
			err = e.Done(key)
		}
		mu.Unlock()
		if err != nil {
			return err
		}
		mu.Lock()
		b := e.Barrier()
		length := *written
		mu.Unlock()
		if r.IntN(2) == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		if err := e.CommitThrough(b, strconv.AppendInt(nil, length, 10)); err != nil {
			return err
		}
		fmt.Printf("C %d\n", length)
		return nil
	}
}

// TestHandlerShapeCrash SIGKILLs the handler shape's child at random
// moments, round after round, then lets a last round finish: the output
// must hold every distinct key exactly once, and no round may start from
// a checkpoint behind one a commit had returned with.
func TestHandlerShapeCrash(t *testing.T) {
	if os.Getenv(hsChildEnv) != "" {
		return
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	killRounds(t, killConfig{child: "TestHandlerShapeChild", kills: 12, env: []string{hsChildEnv + "=" + dir}})
	wpCheckOutput(t, filepath.Join(dir, "out"), hsInput())
}
