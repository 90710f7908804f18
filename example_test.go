package dedup_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
)

// A consumer that processes every event exactly once: observe, process the
// New ones, then commit the keys together with the source position, so a
// restart resumes from Checkpoint and sees committed keys as Duplicate.
func Example() {
	dir, err := os.MkdirTemp("", "dedup-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	e, err := dedup.Open(dedup.Options{Dir: dir, Window: 24 * time.Hour, ExpectedRate: 5000})
	if err != nil {
		log.Fatal(err)
	}
	events := []string{"order-1", "order-2", "order-1", "order-3", "order-2"}
	for offset, id := range events {
		v, err := e.Observe([]byte(id))
		if err != nil {
			log.Fatal(err)
		}
		if v == dedup.New {
			fmt.Println("process", id) // do the work; on failure: e.Forget([]byte(id))
		}
		// Commit after the work, with the position to resume from.
		if err := e.Commit([]byte(fmt.Sprint(offset + 1))); err != nil {
			log.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		log.Fatal(err)
	}

	// After a restart: resume from the checkpoint; a redelivery is dropped.
	e, err = dedup.Open(dedup.Options{Dir: dir, Window: 24 * time.Hour, ExpectedRate: 5000})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	fmt.Printf("resume at offset %s\n", e.Checkpoint())
	v, _ := e.Observe([]byte("order-3"))
	fmt.Println("order-3 again:", v)
	// Output:
	// process order-1
	// process order-2
	// process order-3
	// resume at offset 5
	// order-3 again: duplicate
}

// A pool of workers that processes every event exactly once, with
// dedup.Pool: it owns the ordering lock, the low watermark, the Barrier
// and the commits. Events go in in source order with the position to
// resume from after each; Process runs concurrently, Output under the
// pool's lock; the checkpoint records the watermark and the output's
// length, which a restart truncates back to.
func Example_pool() {
	dir, err := os.MkdirTemp("", "dedup-pool")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	opts := dedup.Options{Dir: dir, Window: time.Hour, ExplicitDone: true}
	e, err := dedup.Open(opts)
	if err != nil {
		log.Fatal(err)
	}
	events := []string{"a", "b", "a", "c", "d", "b", "e", "a", "f", "c", "g", "d"}

	var output []string // the sink; in a service, a file whose length the checkpoint records
	p, err := dedup.NewPool(e, dedup.PoolOptions[string]{
		Workers: 4,
		Key:     func(ev string) []byte { return []byte(ev) },
		Process: func(ctx context.Context, ev string) error {
			return nil // the work; an error makes the pool Forget the key and retry
		},
		Output: func(ev string) error { // under the pool's lock, right before Done
			output = append(output, "processed "+ev)
			return nil
		},
		Checkpoint: func(resume int64) ([]byte, error) { // under the same lock
			return fmt.Appendf(nil, "%d %d", resume, len(output)), nil
		},
		CommitEvery: 5000, // and at least every CommitInterval (1s)
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for i, ev := range events {
		// The position after the event: where to resume once it and every
		// event before it are complete.
		if err := p.Submit(ctx, ev, int64(i+1)); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil { // drains the events, commits
		log.Fatal(err)
	}
	if err := e.Close(); err != nil {
		log.Fatal(err)
	}
	sort.Strings(output)
	fmt.Println(strings.Join(output, ", "))

	// After a restart: truncate the output to the checkpoint's length and
	// resume the input from its watermark; a redelivery is Duplicate.
	e, err = dedup.Open(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	var resume, length int
	fmt.Sscanf(string(e.Checkpoint()), "%d %d", &resume, &length)
	fmt.Println("resume at event", resume, "with", length, "outputs")
	v, _ := e.Observe([]byte("c"))
	fmt.Println("c again:", v)
	// Output:
	// processed a, processed b, processed c, processed d, processed e, processed f, processed g
	// resume at event 12 with 7 outputs
	// c again: duplicate
}

// An HTTP handler is a worker pool: requests run concurrently. With
// ExplicitDone a request's key becomes durable only once its own work is
// done, so request A's commit never makes request B's key durable before
// B's order exists. Each request writes its output and calls Done, takes
// a Barrier and the output's length under one lock, then commits through
// the barrier outside it, bounded by the request's context. To answer a
// repeated key with the first response instead of 409, see the
// idempotency package, which stores results.
func Example_httpHandler() {
	dir, err := os.MkdirTemp("", "dedup-http")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	e, err := dedup.Open(dedup.Options{Dir: dir, Window: 24 * time.Hour, ExplicitDone: true})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()

	var mu sync.Mutex
	var orders []string // the output; in a service, a file whose length the checkpoint records
	createOrder := func(r *http.Request) (string, error) { return "order for " + r.Header.Get("Idempotency-Key"), nil }

	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := []byte("orders:" + r.Header.Get("Idempotency-Key"))
		v, err := e.Observe(key)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case v == dedup.InFlight: // another request with this key is running
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in progress", http.StatusConflict)
			return
		case v == dedup.Duplicate: // done before (or being committed)
			http.Error(w, "already used", http.StatusConflict)
			return
		}
		order, err := createOrder(r)
		if err != nil {
			e.Forget(key) // a retry may run it again
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		orders = append(orders, order)
		err = e.Done(key)
		b := e.Barrier()
		cp := strconv.AppendInt(nil, int64(len(orders)), 10)
		mu.Unlock()
		if err == nil {
			err = e.CommitThroughContext(r.Context(), b, cp)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, order)
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, k := range []string{"k1", "k1", "k2"} {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", nil)
		req.Header.Set("Idempotency-Key", k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %d %s", k, resp.StatusCode, body)
	}
	fmt.Printf("checkpoint: %s orders\n", e.Checkpoint())
	// Output:
	// k1: 201 order for k1
	// k1: 409 already used
	// k2: 201 order for k2
	// checkpoint: 2 orders
}
