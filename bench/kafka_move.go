package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/streamdedup/dedup/kafka"
)

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return ys[len(ys)/2]
}

func count(m map[string][]int32) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}

// move runs one dedup member over the input until it is done, then starts
// a second with no state: it takes half the partitions and rebuilds them
// by replay before they are ready.
func (k *kafkaRun) move(ctx context.Context) (KafkaMove, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, 2)
	group := fmt.Sprintf("bench-%d", k.groups.Add(1))
	var mu sync.Mutex
	var readies []kafka.Ready // of the second member's partitions
	startOne := func(i int) (*kafka.Consumer, error) {
		return k.startConsumer(ctx, &wg, errs, group, i, "in", "move-out", func(r kafka.Ready) {
			if i > 0 {
				mu.Lock()
				readies = append(readies, r)
				mu.Unlock()
			}
		})
	}
	a, err := startOne(0)
	if err != nil {
		return KafkaMove{}, err
	}
	var last uint64
	for a.Stats().CommittedRecords < uint64(k.cfg.Events) {
		if err := pause(ctx, errs); err != nil {
			return KafkaMove{}, err
		}
		n := a.Stats().CommittedRecords
		k.progress.Add(int64(n - last))
		last = n
	}
	if _, err := startOne(1); err != nil {
		return KafkaMove{}, err
	}
	want := int(k.cfg.Partitions) / 2
	deadline := time.Now().Add(5 * time.Minute)
	for {
		mu.Lock()
		n := len(readies)
		mu.Unlock()
		if n >= want {
			break
		}
		if time.Now().After(deadline) {
			return KafkaMove{}, fmt.Errorf("bench: %d of %d moved partitions ready after 5 minutes", n, want)
		}
		if err := pause(ctx, errs); err != nil {
			return KafkaMove{}, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var m KafkaMove
	var took time.Duration
	for _, r := range readies {
		m.Moved++
		m.Replayed += r.Replayed
		took += r.Took
		m.Ready = max(m.Ready, r.Took)
	}
	if took > 0 {
		// The partitions replay in parallel: the group's rate is their
		// records over the slowest one's time.
		m.ReplayRate = float64(m.Replayed) / m.Ready.Seconds()
		m.PerPartition = float64(m.Replayed) / took.Seconds()
	}
	return m, nil
}
