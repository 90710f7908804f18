package dedup_test

import (
	"fmt"
	"log"
	"os"
	"sort"
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

// A pool of workers that processes every event exactly once. With
// ExplicitDone a New key stays owned by its worker until Done, so a Commit
// running meanwhile makes durable only processed keys; the checkpoint is a
// low watermark (every event below it is processed or a Duplicate) and the
// length of the output, which a restart truncates back to.
func Example_workerPool() {
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

	// mu orders the output, Done, the watermark and the commit's barrier:
	// the keys a commit makes durable are exactly those whose output lies
	// below the length it records.
	var mu sync.Mutex
	var output []string // the sink; in a service, a file whose length is recorded
	complete := make([]bool, len(events))
	low := 0 // every event below low is processed or a Duplicate
	finish := func(i int) {
		complete[i] = true
		for low < len(events) && complete[low] {
			low++
		}
	}
	commit := func() error {
		mu.Lock()
		cp := fmt.Appendf(nil, "%d %d", low, len(output))
		b := e.Barrier() // the keys Done so far
		mu.Unlock()
		return e.CommitThrough(b, cp)
	}

	jobs := make(chan int)
	var workers sync.WaitGroup
	for w := 0; w < 4; w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range jobs {
				key := []byte(events[i])
				for {
					v, err := e.Observe(key)
					if err != nil {
						log.Fatal(err)
					}
					if v == dedup.InFlight {
						// Another worker owns a copy and may still Forget it:
						// ask again later, never drop the event.
						time.Sleep(time.Millisecond)
						continue
					}
					mu.Lock()
					if v == dedup.New {
						// Process; on failure call e.Forget(key) instead and
						// try again.
						output = append(output, "processed "+events[i])
						if err := e.Done(key); err != nil {
							log.Fatal(err)
						}
					}
					finish(i)
					mu.Unlock()
					break
				}
			}
		}()
	}
	stop := make(chan struct{})
	committed := make(chan error)
	go func() { // commits run concurrently with the workers
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := commit(); err != nil {
					committed <- err
					return
				}
			case <-stop:
				committed <- commit()
				return
			}
		}
	}()
	for i := range events {
		jobs <- i
	}
	close(jobs)
	workers.Wait()
	close(stop)
	if err := <-committed; err != nil {
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
