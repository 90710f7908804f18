package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/stream"
)

// collector is a prometheus.Collector that reads the engine's Stats and
// the command's counters on each scrape.
type collector struct {
	eng  *dedup.Engine
	run  *filterRun // nil outside `dedup filter`
	desc map[string]*prometheus.Desc
}

// metric names and help, with their type. The engine's duplicates come in
// two kinds: of a key committed before (Verdict Duplicate) and of a key
// observed New and not committed yet (InFlight), which is most repeats in
// a stream; dedup_engine_duplicates_total counts both.
var metricDefs = []struct {
	name, help string
	counter    bool
}{
	{"dedup_engine_observed_total", "Keys observed by the engine.", true},
	{"dedup_engine_new_total", "Keys observed as new.", true},
	{"dedup_engine_duplicates_total", "Keys observed as duplicates: of a committed key, or of a key observed new and not committed yet (dedup_engine_duplicates_in_flight_total).", true},
	{"dedup_engine_duplicates_in_flight_total", "Of dedup_engine_duplicates_total, the duplicates of a key observed new and not committed yet.", true},
	{"dedup_engine_inflight_keys", "Keys observed new and not committed yet.", false},
	{"dedup_engine_store_lookups_total", "Exact-store lookups made for filter hits.", true},
	{"dedup_engine_false_positives_total", "Filter hits the exact store resolved as new keys.", true},
	{"dedup_engine_generations", "Live generations, summed over shards.", false},
	{"dedup_engine_filter_bytes", "Memory held by the filters.", false},
	{"dedup_engine_filter_keys", "Keys held by the filters.", false},
	{"dedup_engine_estimated_fp_rate", "Estimated false-positive rate of a new key.", false},
	{"dedup_engine_observed_fp_samples_total", "Observes of sampled new keys (1/1024 of the hash space, remembered exactly): the base of the observed false-positive rate.", true},
	{"dedup_engine_observed_false_positives_total", "Of dedup_engine_observed_fp_samples_total, the keys the filters matched anyway (in probabilistic mode, new events dropped).", true},
	{"dedup_engine_observed_fp_rate", "Observed false-positive rate of the filters on the sampled new keys, since Open (0 while dedup_engine_observed_fp_samples_total is 0: not measured yet).", false},
	{"dedup_engine_seals_total", "Generations sealed into static fuse filters (--filter fuse), one per generation and shard.", true},
	{"dedup_engine_seal_errors_total", "Generations that will not be sealed (--filter fuse) because their spool of hashes failed: they keep their blocked filter, more memory, no key lost.", true},
	{"dedup_engine_commits_total", "Successful commits.", true},
	{"dedup_engine_commit_errors_total", "Failed commits.", true},
	{"dedup_engine_committed_keys_total", "Keys made durable by commits.", true},
	{"dedup_engine_commit_latency_mean_seconds", "Mean commit latency, fsync included.", false},
	{"dedup_engine_commit_latency_max_seconds", "Max commit latency, fsync included.", false},
	{"dedup_engine_snapshots_total", "Filter snapshots written.", true},
	{"dedup_engine_snapshot_errors_total", "Filter snapshots that failed.", true},
	{"dedup_engine_snapshot_bytes", "Size of the last filter snapshot.", false},
	{"dedup_engine_disk_bytes", "Space the state directory takes on disk as du counts it: the store and the snapshots.", false},
	{"dedup_engine_window_seconds", "The window in force for the keys observed now (sized by the engine under --window auto).", false},
	{"dedup_engine_window_target_seconds", "Under --window auto: the window the measured delays say lets --max-leaks through (0 while not known).", false},
	{"dedup_engine_window_target_bytes", "Under --window auto: the filter memory the target window would take (0 while not known).", false},
	{"dedup_engine_window_changes_total", "Under --window auto: window changes since the engine opened.", true},
	{"dedup_filter_events_total", "Input lines read by this run, rejects included.", true},
	{"dedup_filter_distinct_total", "Distinct events written by this run.", true},
	{"dedup_filter_duplicates_total", "Duplicate events dropped by this run.", true},
	{"dedup_filter_rejects_total", "Rejected input lines of this run.", true},
	{"dedup_filter_input_bytes_total", "Input bytes consumed by this run.", true},
}

func newCollector(eng *dedup.Engine, run *filterRun) *collector {
	c := &collector{eng: eng, run: run, desc: map[string]*prometheus.Desc{}}
	for _, d := range metricDefs {
		c.desc[d.name] = prometheus.NewDesc(d.name, d.help, nil, nil)
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
	vals := engineMetricValues(c.eng.Stats())
	if r := c.run; r != nil {
		var cn stream.Counts // zero until the run's filter is made
		if sf := r.filter.Load(); sf != nil {
			cn = sf.Counts()
		}
		vals["dedup_filter_events_total"] = float64(cn.Events)
		vals["dedup_filter_distinct_total"] = float64(cn.Distinct)
		vals["dedup_filter_duplicates_total"] = float64(cn.Duplicates)
		vals["dedup_filter_rejects_total"] = float64(cn.Rejects)
		vals["dedup_filter_input_bytes_total"] = float64(cn.Bytes)
	}
	for _, d := range metricDefs {
		v, ok := vals[d.name]
		if !ok {
			continue
		}
		t := prometheus.GaugeValue
		if d.counter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(c.desc[d.name], t, v)
	}
}

// engineMetricValues maps an engine's Stats to the dedup_engine_* metrics
// of metricDefs.
func engineMetricValues(st dedup.Stats) map[string]float64 {
	vals := map[string]float64{
		"dedup_engine_observed_total":                 float64(st.Observed),
		"dedup_engine_new_total":                      float64(st.New),
		"dedup_engine_duplicates_total":               float64(st.Duplicate + st.InFlightVerdicts),
		"dedup_engine_duplicates_in_flight_total":     float64(st.InFlightVerdicts),
		"dedup_engine_inflight_keys":                  float64(st.InFlightKeys),
		"dedup_engine_store_lookups_total":            float64(st.StoreLookups),
		"dedup_engine_false_positives_total":          float64(st.FalsePositives),
		"dedup_engine_generations":                    float64(st.Generations),
		"dedup_engine_filter_bytes":                   float64(st.FilterBytes),
		"dedup_engine_filter_keys":                    float64(st.FilterKeys),
		"dedup_engine_estimated_fp_rate":              st.EstimatedFPRate,
		"dedup_engine_observed_fp_samples_total":      float64(st.ObservedFPSamples),
		"dedup_engine_observed_false_positives_total": math.Round(st.ObservedFPRate * float64(st.ObservedFPSamples)),
		"dedup_engine_observed_fp_rate":               st.ObservedFPRate,
		"dedup_engine_seals_total":                    float64(st.Seals),
		"dedup_engine_seal_errors_total":              float64(st.SealErrors),
		"dedup_engine_commits_total":                  float64(st.Commits),
		"dedup_engine_commit_errors_total":            float64(st.CommitErrors),
		"dedup_engine_committed_keys_total":           float64(st.CommittedKeys),
		"dedup_engine_commit_latency_mean_seconds":    st.CommitLatencyMean.Seconds(),
		"dedup_engine_commit_latency_max_seconds":     st.CommitLatencyMax.Seconds(),
		"dedup_engine_snapshots_total":                float64(st.Snapshots),
		"dedup_engine_snapshot_errors_total":          float64(st.SnapshotErrors),
		"dedup_engine_snapshot_bytes":                 float64(st.SnapshotBytes),
		"dedup_engine_disk_bytes":                     float64(st.DiskBytes),
		"dedup_engine_window_seconds":                 st.AutoWindow.Window.Seconds(),
		"dedup_engine_window_target_seconds":          st.AutoWindow.Target.Seconds(),
		"dedup_engine_window_target_bytes":            float64(st.AutoWindow.TargetBytes),
		"dedup_engine_window_changes_total":           float64(st.AutoWindow.Changes),
	}
	for k, v := range adviceMetricValues(st.WindowAdvice) {
		vals[adviceMetrics[k].name] = v
	}
	return vals
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

// openMetricsPort takes the --metrics address of dedup filter before
// anything is written: a port in use fails the run while nothing was
// created yet.
func (f *filterRun) openMetricsPort() error {
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

// registry returns the registry dedup filter's --metrics serves: the
// engine's and the run's figures, the commit and snapshot histograms (made
// here), and the Go runtime's and the process's collectors.
func (f *filterRun) registry() (*prometheus.Registry, error) {
	f.commitHist, f.snapshotHist = newHistograms()
	return newRegistry(newCollector(f.eng, f), f.commitHist, f.snapshotHist)
}

// newRegistry returns a registry of cs and of the Go runtime's and the
// process's collectors.
func newRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// serveMetrics serves /metrics on dedup filter's --metrics listener until
// the returned stop.
func (f *filterRun) serveMetrics() (stop func() error, err error) {
	if f.metricsLn == nil {
		return func() error { return nil }, nil
	}
	reg, err := f.registry()
	if err != nil {
		_ = f.metricsLn.Close()
		return nil, err
	}
	stopServer := serveRegistry(f.metricsLn, reg)
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
		return stopServer()
	}, nil
}

// listenMetrics serves the metrics of c, with the Go runtime's and the
// process's, at /metrics on addr until the returned stop.
func listenMetrics(cmd, addr string, c prometheus.Collector) (stop func() error, err error) {
	reg, err := newRegistry(c)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenErr(cmd, "metrics", addr, err)
	}
	return serveRegistry(ln, reg), nil
}

// serveRegistry serves reg at /metrics on ln until the returned stop.
func serveRegistry(ln net.Listener, reg *prometheus.Registry) (stop func() error) {
	return serveMetricsMux(ln, reg, http.NewServeMux())
}

// serveMetricsMux serves reg at /metrics on ln, beside the handlers mux
// has already, until the returned stop.
func serveMetricsMux(ln net.Listener, reg *prometheus.Registry, mux *http.ServeMux) (stop func() error) {
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() error {
		if err := srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics: %w", err)
		}
		return nil
	}
}
