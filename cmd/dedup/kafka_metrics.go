package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamdedup/dedup/kafka"
)

// kafkaCollector exports a consumer's counters.
type kafkaCollector struct {
	c       *kafka.Consumer
	descs   []*prometheus.Desc
	hoDescs []*prometheus.Desc
}

var kafkaMetricDefs = []struct {
	name, help string
	counter    bool
	value      func(kafka.Stats) float64
}{
	{"dedup_kafka_records_total", "Input records processed, those of aborted transactions included (replays excluded).", true, func(s kafka.Stats) float64 { return float64(s.Records) }},
	{"dedup_kafka_committed_records_total", "Input records of committed transactions.", true, func(s kafka.Stats) float64 { return float64(s.CommittedRecords) }},
	{"dedup_kafka_new_total", "Records of committed transactions written to the output topic.", true, func(s kafka.Stats) float64 { return float64(s.New) }},
	{"dedup_kafka_duplicates_total", "Duplicates of committed transactions, dropped or sent to --dups-topic.", true, func(s kafka.Stats) float64 { return float64(s.Duplicates) }},
	{"dedup_kafka_rejected_total", "Records of committed transactions without a usable key.", true, func(s kafka.Stats) float64 { return float64(s.Rejected) }},
	{"dedup_kafka_transactions_committed_total", "Transactions committed.", true, func(s kafka.Stats) float64 { return float64(s.Committed) }},
	{"dedup_kafka_transactions_aborted_total", "Transactions aborted.", true, func(s kafka.Stats) float64 { return float64(s.Aborted) }},
	{"dedup_kafka_replayed_total", "Records replayed into engines, output suppressed.", true, func(s kafka.Stats) float64 { return float64(s.Replayed) }},
	{"dedup_kafka_sessions_total", "Group sessions started.", true, func(s kafka.Stats) float64 { return float64(s.Sessions) }},
	{"dedup_kafka_partitions", "Partitions assigned now.", false, func(s kafka.Stats) float64 { return float64(s.Partitions) }},
}

// The handover metrics (--handover), all counters.
var kafkaHandoverDefs = []struct {
	name, help string
	value      func(kafka.HandoverStats) float64
}{
	{"dedup_kafka_handover_exports_total", "Partition states exported to the handover store.", func(s kafka.HandoverStats) float64 { return float64(s.Exports) }},
	{"dedup_kafka_handover_export_failures_total", "Exports that failed or ran out of time.", func(s kafka.HandoverStats) float64 { return float64(s.ExportFailures) }},
	{"dedup_kafka_handover_exported_bytes_total", "Bytes uploaded by exports (files the store held already excluded).", func(s kafka.HandoverStats) float64 { return float64(s.ExportedBytes) }},
	{"dedup_kafka_handover_export_seconds_total", "Time spent exporting, backups included.", func(s kafka.HandoverStats) float64 { return s.ExportTime.Seconds() }},
	{"dedup_kafka_handover_imports_total", "Partitions made ready from an export.", func(s kafka.HandoverStats) float64 { return float64(s.Imports) }},
	{"dedup_kafka_handover_imported_bytes_total", "Bytes of the exports imported (installed as a partition's state); a damaged or unusable export's download is not counted.", func(s kafka.HandoverStats) float64 { return float64(s.ImportedBytes) }},
	{"dedup_kafka_handover_import_seconds_total", "Time spent importing, restores included.", func(s kafka.HandoverStats) float64 { return s.ImportTime.Seconds() }},
}

var kafkaFallbacksDesc = prometheus.NewDesc("dedup_kafka_handover_fallbacks_total", "Partitions rebuilt by replay instead of an import, by reason: none (no export), stale (exports ahead of the group or older than the window), damaged, incompatible (another window or format), error (store unreadable or timed out).", []string{"reason"}, nil)

// The per-partition metrics, labeled partition="<topic>-<n>".
var (
	kafkaLagDesc      = prometheus.NewDesc("dedup_kafka_partition_lag", "Records behind the last one fetched, from the fetch's high watermark (absent until the partition's first fetch).", []string{"partition"}, nil)
	kafkaStateDesc    = prometheus.NewDesc("dedup_kafka_partition_state", "1 for the state the partition is in: ready (consuming), importing (its state from --handover) or replaying (its engine being made current).", []string{"partition", "state"}, nil)
	kafkaReplayedDesc = prometheus.NewDesc("dedup_kafka_partition_replayed_total", "Records replayed into the partition's engine since it was assigned, output suppressed.", []string{"partition"}, nil)
	kafkaReadyDesc    = prometheus.NewDesc("dedup_kafka_ready", "1 when the instance is in the group and every partition assigned to it is ready (as /readyz).", nil, nil)
	kafkaLeaksDesc    = prometheus.NewDesc("dedup_kafka_partition_window_leaks_per_million", "Window advice: duplicates the window lets through per million records of the partition (0 until measured).", []string{"partition"}, nil)
	kafkaWindowDesc   = prometheus.NewDesc("dedup_kafka_partition_window_for_seconds", "Window advice: the smallest window that would let at most target duplicates per million records through (0 until known).", []string{"partition", "target_per_million"}, nil)
)

func newKafkaCollector(c *kafka.Consumer) *kafkaCollector {
	k := &kafkaCollector{c: c}
	for _, d := range kafkaMetricDefs {
		k.descs = append(k.descs, prometheus.NewDesc(d.name, d.help, nil, nil))
	}
	for _, d := range kafkaHandoverDefs {
		k.hoDescs = append(k.hoDescs, prometheus.NewDesc(d.name, d.help, nil, nil))
	}
	return k
}

// Describe sends every metric's description.
func (k *kafkaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range k.descs {
		ch <- d
	}
	for _, d := range k.hoDescs {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{kafkaLagDesc, kafkaStateDesc, kafkaReplayedDesc, kafkaReadyDesc, kafkaLeaksDesc, kafkaWindowDesc, kafkaFallbacksDesc} {
		ch <- d
	}
}

// Collect reads the consumer's Stats once.
func (k *kafkaCollector) Collect(ch chan<- prometheus.Metric) {
	st := k.c.Stats()
	for i, d := range kafkaMetricDefs {
		kind := prometheus.GaugeValue
		if d.counter {
			kind = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(k.descs[i], kind, d.value(st))
	}
	for _, p := range k.c.PartitionStates() {
		collectPartition(ch, p)
	}
	hs := k.c.HandoverStats()
	for i, d := range kafkaHandoverDefs {
		ch <- prometheus.MustNewConstMetric(k.hoDescs[i], prometheus.CounterValue, d.value(hs))
	}
	for _, r := range kafka.FallbackReasons {
		ch <- prometheus.MustNewConstMetric(kafkaFallbacksDesc, prometheus.CounterValue, float64(hs.Fallbacks[r]), r)
	}
	ready := 0.0
	if k.c.Ready() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(kafkaReadyDesc, prometheus.GaugeValue, ready)
}

// collectPartition sends the metrics of one partition. Its lag is left
// out until a fetch has measured it.
func collectPartition(ch chan<- prometheus.Metric, p kafka.PartitionState) {
	name := fmt.Sprintf("%s-%d", p.Topic, p.Partition)
	ready, importing, replaying := 0.0, 0.0, 1.0
	switch {
	case p.Ready:
		ready, replaying = 1, 0
	case p.Importing:
		importing, replaying = 1, 0
	}
	if p.Lag >= 0 {
		ch <- prometheus.MustNewConstMetric(kafkaLagDesc, prometheus.GaugeValue, float64(p.Lag), name)
	}
	ch <- prometheus.MustNewConstMetric(kafkaStateDesc, prometheus.GaugeValue, ready, name, "ready")
	ch <- prometheus.MustNewConstMetric(kafkaStateDesc, prometheus.GaugeValue, importing, name, "importing")
	ch <- prometheus.MustNewConstMetric(kafkaStateDesc, prometheus.GaugeValue, replaying, name, "replaying")
	ch <- prometheus.MustNewConstMetric(kafkaReplayedDesc, prometheus.CounterValue, float64(p.Replayed), name)
	ch <- prometheus.MustNewConstMetric(kafkaLeaksDesc, prometheus.GaugeValue, p.Advice.LeaksPerMillion, name)
	for _, w := range []struct {
		target string
		d      time.Duration
	}{{"100", p.Advice.WindowFor100}, {"10", p.Advice.WindowFor10}, {"1", p.Advice.WindowFor1}} {
		ch <- prometheus.MustNewConstMetric(kafkaWindowDesc, prometheus.GaugeValue, w.d.Seconds(), name, w.target)
	}
}

// listenKafkaMetrics serves c's metrics at /metrics on addr, with the Go
// runtime's and the process's, "ok" at /healthz while the process runs,
// and at /readyz 200 when c is ready (in the group, every assigned
// partition's state current) or 503 saying which partitions are not.
func listenKafkaMetrics(addr string, c *kafka.Consumer) (stop func() error, err error) {
	reg, err := newRegistry(newKafkaCollector(c))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenErr("kafka", "metrics", addr, err)
	}
	return serveKafkaMetrics(ln, reg, c), nil
}

// serveKafkaMetrics serves listenKafkaMetrics's endpoints on ln until the
// returned stop.
func serveKafkaMetrics(ln net.Listener, reg *prometheus.Registry, c *kafka.Consumer) (stop func() error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if c.Ready() {
			fmt.Fprintln(w, "ready")
			return
		}
		var waiting []string
		for _, p := range c.PartitionStates() {
			switch {
			case p.Importing:
				waiting = append(waiting, fmt.Sprintf("%s-%d importing", p.Topic, p.Partition))
			case !p.Ready:
				waiting = append(waiting, fmt.Sprintf("%s-%d replaying (%d records so far)", p.Topic, p.Partition, p.Replayed))
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		if err := c.BrokerErr(); err != nil {
			fmt.Fprintf(w, "not ready: cannot reach the brokers: %v\n", err)
			return
		}
		if len(waiting) == 0 {
			fmt.Fprintln(w, "not ready: joining the group")
			return
		}
		fmt.Fprintf(w, "not ready: %s\n", strings.Join(waiting, ", "))
	})
	return serveMetricsMux(ln, reg, mux)
}
