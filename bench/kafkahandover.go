package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/streamdedup/dedup/handover"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"gonum.org/v1/plot/plotter"
)

// KafkaHandoverConfig configures the handover scenario: a partition of
// Records records moves to an instance with no state, which makes it
// ready by replay or by importing the old owner's export (file://), in
// the same run, alternating.
type KafkaHandoverConfig struct {
	// Records are the partition sizes measured. Default 1M and 10M.
	Records []int
	// Repeat is how many moves of each kind are timed per size; the
	// median is reported. Default 2.
	Repeat int
	// DuplicateFraction of the input. Default 0.2.
	DuplicateFraction float64
	// Probabilistic runs the engines without exact stores.
	Probabilistic bool
	// Dir holds the states and the handover store; "" makes a temporary
	// directory.
	Dir string
}

// KafkaHandoverRow is one partition size: time to ready after a move by
// replay and by handover, and their ratio.
type KafkaHandoverRow struct {
	Records  int           `json:"records"`
	Replay   time.Duration `json:"replay_ready_ns"`   // median time to ready by replay
	Handover time.Duration `json:"handover_ready_ns"` // median time to ready by import
	Ratio    float64       `json:"replay_over_handover"`
	// Replayed counts the records the replay fed; HandoverReplayed those
	// replayed after the import (none: the old owner exported on revoke).
	Replayed         int64 `json:"replayed"`
	HandoverReplayed int64 `json:"handover_replayed"`
	// ExportBytes is the export's size, ExportTime how long the old
	// owner's export on revoke took (backup and upload).
	ExportBytes int64         `json:"export_bytes"`
	ExportTime  time.Duration `json:"export_ns"`
	Ingest      float64       `json:"ingest_events_per_sec"` // the old owner's rate through the input
}

// KafkaHandoverResult is the scenario's outcome.
type KafkaHandoverResult struct {
	Config KafkaHandoverConfig `json:"config"`
	Rows   []KafkaHandoverRow  `json:"rows"`
}

// KafkaHandover runs the handover scenario.
func KafkaHandover(ctx context.Context, cfg KafkaHandoverConfig, progress Progress) (*KafkaHandoverResult, error) {
	if len(cfg.Records) == 0 {
		cfg.Records = []int{1_000_000, 10_000_000}
	}
	if cfg.Repeat == 0 {
		cfg.Repeat = 2
	}
	if cfg.DuplicateFraction == 0 {
		cfg.DuplicateFraction = 0.2
	}
	if cfg.Repeat < 1 || slices.ContainsFunc(cfg.Records, func(n int) bool { return n < 1 }) {
		return nil, fmt.Errorf("%w: Repeat and Records must be positive", errKafkaBench)
	}
	progress = orNop(progress)
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "dedupbench-handover-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := &KafkaHandoverResult{Config: cfg}
	for _, n := range cfg.Records {
		row, err := handoverMove(ctx, cfg, n, filepath.Join(dir, fmt.Sprint(n)), progress)
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// handoverMove measures one partition size on a broker of its own.
func handoverMove(ctx context.Context, cfg KafkaHandoverConfig, n int, dir string, progress Progress) (KafkaHandoverRow, error) {
	row := KafkaHandoverRow{Records: n}
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		return row, fmt.Errorf("bench: kfake: %w", err)
	}
	defer cl.Close()
	store, err := openHandoverStore(ctx, filepath.Join(dir, "store"))
	if err != nil {
		return row, err
	}
	defer store.Close()
	k := &kafkaRun{cfg: KafkaConfig{DuplicateFraction: cfg.DuplicateFraction, Probabilistic: cfg.Probabilistic}, cluster: cl, addrs: cl.ListenAddrs(), dir: dir, progress: progress}
	progress.Stage(fmt.Sprintf("kafka handover %d: produce", n), int64(n))
	if _, err := k.produceInput(ctx, "in", n, time.Now()); err != nil {
		return row, err
	}

	// member runs one instance until it has made its partition ready (and,
	// with wantAll, processed the whole input), then stops it.
	member := func(name string, withHandover, wantAll bool) (kafka.Ready, *kafka.Consumer, time.Duration, error) {
		var mu sync.Mutex
		var ready *kafka.Ready
		cc := k.consumerConfig("g", "in", "out", filepath.Join(dir, name), func(r kafka.Ready) {
			mu.Lock()
			ready = &r
			mu.Unlock()
		})
		cc.ShutdownTimeout = 5 * time.Minute
		if withHandover {
			cc.Handover = store
			cc.HandoverInterval = time.Hour // the old owner exports on revoke
			cc.HandoverRevokeTimeout = 5 * time.Minute
		}
		c, err := kafka.New(cc)
		if err != nil {
			return kafka.Ready{}, nil, 0, err
		}
		rctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- c.Run(rctx) }()
		start := time.Now()
		var took time.Duration
		for {
			mu.Lock()
			done := ready != nil && (!wantAll || c.Stats().CommittedRecords >= uint64(n))
			mu.Unlock()
			if done {
				took = time.Since(start)
				break
			}
			select {
			case err := <-errc:
				cancel()
				return kafka.Ready{}, nil, 0, errors.Join(err, fmt.Errorf("bench: %s stopped", name))
			case <-ctx.Done():
				cancel()
				<-errc
				return kafka.Ready{}, nil, 0, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancel()
		if err := <-errc; err != nil {
			return kafka.Ready{}, nil, 0, err
		}
		return *ready, c, took, nil
	}

	progress.Stage(fmt.Sprintf("kafka handover %d: first owner", n), int64(n))
	_, a, took, err := member("a", true, true)
	if err != nil {
		return row, err
	}
	row.Ingest = float64(n) / took.Seconds()
	hs := a.HandoverStats()
	if hs.Exports != 1 {
		return row, fmt.Errorf("bench: the first owner exported %d times on revoke (%d failures), want once", hs.Exports, hs.ExportFailures)
	}
	row.ExportTime = hs.ExportTime
	ms, err := store.Latest(ctx, handover.Partition{Group: "g", Topic: "in"}, int64(n)*2, 1)
	if err != nil {
		return row, err
	}
	row.ExportBytes = ms[0].Bytes()

	var replay, ho []time.Duration
	for r := range cfg.Repeat {
		progress.Stage(fmt.Sprintf("kafka handover %d: move by replay (%d/%d)", n, r+1, cfg.Repeat), int64(n))
		rd, _, _, err := member(fmt.Sprintf("replay-%d", r), false, false)
		if err != nil {
			return row, err
		}
		if rd.Imported >= 0 {
			return row, fmt.Errorf("bench: the replay member imported: %+v", rd)
		}
		replay = append(replay, rd.Took)
		row.Replayed = rd.Replayed
		progress.Stage(fmt.Sprintf("kafka handover %d: move by handover (%d/%d)", n, r+1, cfg.Repeat), int64(n))
		rd, _, _, err = member(fmt.Sprintf("handover-%d", r), true, false)
		if err != nil {
			return row, err
		}
		if rd.Imported < 0 {
			return row, fmt.Errorf("bench: the handover member did not import (%s)", rd.Fallback)
		}
		ho = append(ho, rd.Took)
		row.HandoverReplayed = rd.Replayed
		for _, d := range []string{fmt.Sprintf("replay-%d", r), fmt.Sprintf("handover-%d", r)} {
			os.RemoveAll(filepath.Join(dir, d))
		}
	}
	row.Replay, row.Handover = medianDur(replay), medianDur(ho)
	if row.Handover > 0 {
		row.Ratio = row.Replay.Seconds() / row.Handover.Seconds()
	}
	return row, nil
}

// openHandoverStore opens a handover store of files in dir, creating it.
func openHandoverStore(ctx context.Context, dir string) (*handover.Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return handover.Open(ctx, "file://"+filepath.ToSlash(dir))
}

func medianDur(ds []time.Duration) time.Duration {
	fs := make([]float64, len(ds))
	for i, d := range ds {
		fs[i] = float64(d)
	}
	return time.Duration(median(fs))
}

// WriteText writes the scenario's table.
func (r *KafkaHandoverResult) WriteText(w io.Writer) error {
	rows := make([][]string, 0, len(r.Rows))
	for _, x := range r.Rows {
		rows = append(rows, []string{humanize.Count(float64(x.Records)), lat(x.Replay), lat(x.Handover), fmt.Sprintf("%.1f", x.Ratio),
			humanize.Count(float64(x.Replayed)), humanize.Count(float64(x.HandoverReplayed)), humanize.Bytes(uint64(x.ExportBytes)), lat(x.ExportTime)})
	}
	fmt.Fprintf(w, "Kafka partition move (in-process kfake broker, one partition, %.0f%% duplicates; time from assignment to ready, median of %d, replay and handover alternating; handover store file://)\n\n",
		100*r.Config.DuplicateFraction, r.Config.Repeat)
	return table(w, "records\treplay ready\thandover ready\treplay/handover\treplayed\treplayed after import\texport size\texport on revoke", rows)
}

// PlotKafkaHandover draws time to ready after a move against the
// partition's records, by replay and by handover: kafka_handover, as SVG
// and PNG in dir.
func PlotKafkaHandover(r *KafkaHandoverResult, dir string) ([]string, error) {
	var rep, ho plotter.XYs
	for _, x := range r.Rows {
		rep = append(rep, plotter.XY{X: float64(x.Records), Y: x.Replay.Seconds()})
		ho = append(ho, plotter.XY{X: float64(x.Records), Y: x.Handover.Seconds()})
	}
	return plotLines(dir, "kafka_handover", "dedup on Kafka: time to ready after a partition move",
		"records in the partition", "seconds", "replay", rep, "handover (import)", ho)
}
