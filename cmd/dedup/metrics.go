package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// metric names and help, with their type.
var metricDefs = []struct {
	name, help string
	counter    bool
}{
	{"dedup_engine_observed_total", "Keys observed by the engine.", true},
	{"dedup_engine_new_total", "Observe verdicts New.", true},
	{"dedup_engine_duplicate_total", "Observe verdicts Duplicate.", true},
	{"dedup_engine_inflight_total", "Observe verdicts InFlight.", true},
	{"dedup_engine_inflight_keys", "Keys observed New and not committed yet.", false},
	{"dedup_engine_store_lookups_total", "Exact-store lookups made for filter hits.", true},
	{"dedup_engine_false_positives_total", "Filter hits the exact store resolved as new keys.", true},
	{"dedup_engine_generations", "Live generations, summed over shards.", false},
	{"dedup_engine_filter_bytes", "Memory held by the filters.", false},
	{"dedup_engine_filter_keys", "Keys held by the filters.", false},
	{"dedup_engine_estimated_fp_rate", "Estimated false-positive rate of a new key.", false},
	{"dedup_engine_commits_total", "Successful commits.", true},
	{"dedup_engine_commit_errors_total", "Failed commits.", true},
	{"dedup_engine_committed_keys_total", "Keys made durable by commits.", true},
	{"dedup_engine_commit_latency_mean_seconds", "Mean commit latency, fsync included.", false},
	{"dedup_engine_commit_latency_max_seconds", "Max commit latency, fsync included.", false},
	{"dedup_engine_disk_bytes", "Size of the exact store on disk.", false},
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
		vals["dedup_filter_events_total"] = float64(r.pub.events.Load())
		vals["dedup_filter_distinct_total"] = float64(r.pub.distinct.Load())
		vals["dedup_filter_duplicates_total"] = float64(r.pub.dups.Load())
		vals["dedup_filter_rejects_total"] = float64(r.pub.rejects.Load())
		vals["dedup_filter_input_bytes_total"] = float64(r.pub.bytes.Load())
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
	return map[string]float64{
		"dedup_engine_observed_total":              float64(st.Observed),
		"dedup_engine_new_total":                   float64(st.New),
		"dedup_engine_duplicate_total":             float64(st.Duplicate),
		"dedup_engine_inflight_total":              float64(st.InFlight),
		"dedup_engine_inflight_keys":               float64(st.InFlightKeys),
		"dedup_engine_store_lookups_total":         float64(st.StoreLookups),
		"dedup_engine_false_positives_total":       float64(st.FalsePositives),
		"dedup_engine_generations":                 float64(st.Generations),
		"dedup_engine_filter_bytes":                float64(st.FilterBytes),
		"dedup_engine_filter_keys":                 float64(st.FilterKeys),
		"dedup_engine_estimated_fp_rate":           st.EstimatedFPRate,
		"dedup_engine_commits_total":               float64(st.Commits),
		"dedup_engine_commit_errors_total":         float64(st.CommitErrors),
		"dedup_engine_committed_keys_total":        float64(st.CommittedKeys),
		"dedup_engine_commit_latency_mean_seconds": st.CommitLatencyMean.Seconds(),
		"dedup_engine_commit_latency_max_seconds":  st.CommitLatencyMax.Seconds(),
		"dedup_engine_disk_bytes":                  float64(st.DiskBytes),
	}
}

// serveMetrics serves /metrics on --metrics ADDR until the returned stop.
func (f *filterRun) serveMetrics() (stop func() error, err error) {
	if f.cfg.metrics == "" {
		return func() error { return nil }, nil
	}
	return listenMetrics(f.cfg.metrics, newCollector(f.eng, f))
}

// listenMetrics serves the metrics of c at /metrics on addr until the
// returned stop.
func listenMetrics(addr string, c prometheus.Collector) (stop func() error, err error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() error {
		if err := srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics: %w", err)
		}
		return nil
	}, nil
}
