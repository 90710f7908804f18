package dedup_test

import (
	"fmt"
	"log"
	"os"
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
