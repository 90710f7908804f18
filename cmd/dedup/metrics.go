package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/streamdedup/dedup"
)

// collector is a prometheus.Collector that reads the engine's Stats and
// the command's counters on each scrape.
type collector struct {
	eng  *dedup.Engine
	run  *filterRun // nil outside `dedup filter`
	desc map[string]*prometheus.Desc
}

// metric names and help, with their type. The duplicates the engine
// reports come in two kinds, one label apart: a key committed before
// (Verdict Duplicate) and a key observed New and not committed yet
// (InFlight, most of them in a stream); their sum is every duplicate.
var metricDefs = []struct {
	name, help string
	counter    bool
	labels     []string
}{
	{"dedup_engine_observed_total", "Keys observed by the engine.", true, nil},
	{"dedup_engine_new_total", "Keys observed as new.", true, nil},
	{"dedup_engine_duplicates_total", "Keys observed as duplicates: of a committed key (of=\"committed\") or of a key observed new and not committed yet (of=\"in_flight\"). Their sum is every duplicate.", true, []string{"of"}},
	{"dedup_engine_inflight_keys", "Keys observed new and not committed yet.", false, nil},
	{"dedup_engine_store_lookups_total", "Exact-store lookups made for filter hits.", true, nil},
	{"dedup_engine_false_positives_total", "Filter hits the exact store resolved as new keys.", true, nil},
	{"dedup_engine_generations", "Live generations, summed over shards.", false, nil},
	{"dedup_engine_filter_bytes", "Memory held by the filters.", false, nil},
	{"dedup_engine_filter_keys", "Keys held by the filters.", false, nil},
	{"dedup_engine_estimated_fp_rate", "Estimated false-positive rate of a new key.", false, nil},
	{"dedup_engine_commits_total", "Successful commits.", true, nil},
	{"dedup_engine_commit_errors_total", "Failed commits.", true, nil},
	{"dedup_engine_committed_keys_total", "Keys made durable by commits.", true, nil},
	{"dedup_engine_snapshots_total", "Filter snapshots written.", true, nil},
	{"dedup_engine_snapshot_errors_total", "Filter snapshots that failed.", true, nil},
	{"dedup_engine_snapshot_bytes", "Size of the last filter snapshot.", false, nil},
	{"dedup_engine_disk_bytes", "Size of the exact store on disk.", false, nil},
	{"dedup_filter_events_total", "Input lines read by this run, rejects included.", true, nil},
	{"dedup_filter_distinct_total", "Distinct events written by this run.", true, nil},
	{"dedup_filter_duplicates_total", "Duplicate events dropped by this run.", true, nil},
	{"dedup_filter_rejects_total", "Rejected input lines of this run.", true, nil},
	{"dedup_filter_input_bytes_total", "Input bytes consumed by this run.", true, nil},
}

func newCollector(eng *dedup.Engine, run *filterRun) *collector {
	c := &collector{eng: eng, run: run, desc: map[string]*prometheus.Desc{}}
	for _, d := range metricDefs {
		c.desc[d.name] = prometheus.NewDesc(d.name, d.help, d.labels, nil)
	}
	return c
}

// Describe sends every metric's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricDefs {
		ch <- c.desc[d.name]
	}
}

// Collect reads the engine's Stats once and sends every metric.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.eng.Stats()
	send := func(name string, v float64, labels ...string) {
		t := prometheus.GaugeValue
		for _, d := range metricDefs {
			if d.name == name && d.counter {
				t = prometheus.CounterValue
			}
		}
		ch <- prometheus.MustNewConstMetric(c.desc[name], t, v, labels...)
	}
	send("dedup_engine_observed_total", float64(st.Observed))
	send("dedup_engine_new_total", float64(st.New))
	send("dedup_engine_duplicates_total", float64(st.Duplicate), "committed")
	send("dedup_engine_duplicates_total", float64(st.InFlight), "in_flight")
	send("dedup_engine_inflight_keys", float64(st.InFlightKeys))
	send("dedup_engine_store_lookups_total", float64(st.StoreLookups))
	send("dedup_engine_false_positives_total", float64(st.FalsePositives))
	send("dedup_engine_generations", float64(st.Generations))
	send("dedup_engine_filter_bytes", float64(st.FilterBytes))
	send("dedup_engine_filter_keys", float64(st.FilterKeys))
	send("dedup_engine_estimated_fp_rate", st.EstimatedFPRate)
	send("dedup_engine_commits_total", float64(st.Commits))
	send("dedup_engine_commit_errors_total", float64(st.CommitErrors))
	send("dedup_engine_committed_keys_total", float64(st.CommittedKeys))
	send("dedup_engine_snapshots_total", float64(st.Snapshots))
	send("dedup_engine_snapshot_errors_total", float64(st.SnapshotErrors))
	send("dedup_engine_snapshot_bytes", float64(st.SnapshotBytes))
	send("dedup_engine_disk_bytes", float64(st.DiskBytes))
	if r := c.run; r != nil {
		send("dedup_filter_events_total", float64(r.pub.events.Load()))
		send("dedup_filter_distinct_total", float64(r.pub.distinct.Load()))
		send("dedup_filter_duplicates_total", float64(r.pub.dups.Load()))
		send("dedup_filter_rejects_total", float64(r.pub.rejects.Load()))
		send("dedup_filter_input_bytes_total", float64(r.pub.bytes.Load()))
	}
}

// newHistograms returns the histograms of commit and snapshot durations.
func newHistograms() (commit, snap prometheus.Histogram) {
	commit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "dedup_filter_commit_duration_seconds",
		Help:    "Duration of the commits of this run: the fsync of the outputs and the engine's commit of the keys with the position.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
	})
	snap = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "dedup_engine_snapshot_duration_seconds",
		Help:    "Duration of the periodic filter snapshots (--snapshot-interval) of this run.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms .. 41 s
	})
	return commit, snap
}

// listenMetrics takes the --metrics address, before anything is written:
// a port in use fails the run while nothing was created yet.
func (f *filterRun) listenMetrics() error {
	if f.cfg.metrics == "" {
		return nil
	}
	ln, err := net.Listen("tcp", f.cfg.metrics)
	if err != nil {
		return fmt.Errorf("--metrics %s: %w", f.cfg.metrics, err)
	}
	f.metricsLn = ln
	return nil
}

// registry returns the registry --metrics serves: the engine's and the
// run's figures, the commit and snapshot histograms (made here), and the
// Go runtime's and the process's collectors.
func (f *filterRun) registry() (*prometheus.Registry, error) {
	f.commitHist, f.snapshotHist = newHistograms()
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		newCollector(f.eng, f), f.commitHist, f.snapshotHist,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// serveMetrics serves /metrics on the --metrics listener until the
// returned stop: the engine's and the run's figures, the commit and
// snapshot durations, and the Go runtime's and the process's metrics.
func (f *filterRun) serveMetrics() (stop func() error, err error) {
	if f.metricsLn == nil {
		return func() error { return nil }, nil
	}
	reg, err := f.registry()
	if err != nil {
		_ = f.metricsLn.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(f.metricsLn) }()
	// The engine takes the periodic snapshots: a new one shows in its
	// Stats, whose last duration goes into the histogram.
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		seen := f.eng.Stats().Snapshots
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if st := f.eng.Stats(); st.Snapshots != seen {
				seen = st.Snapshots
				f.snapshotHist.Observe(st.LastSnapshotDuration.Seconds())
			}
		}
	}()
	return func() error {
		close(quit)
		<-done
		if err := srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics: %w", err)
		}
		return nil
	}, nil
}
