package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamdedup/dedup/idempotency"
)

// proxyMetrics are the proxy's own metrics.
type proxyMetrics struct {
	outcomes *prometheus.CounterVec
	// byOutcome holds the counter of each outcome, resolved once: a
	// lookup by label per request costs a hash of the label and a lock.
	byOutcome [outcomeCount]prometheus.Counter
	stored    prometheus.Counter
	upstream  prometheus.Histogram
}

func newProxyMetrics() *proxyMetrics {
	m := &proxyMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedup_proxy_requests_total",
			Help: "Requests by outcome: executed (sent upstream, response stored), replayed, conflict (409), mismatch (422), released (sent upstream, not stored: 5xx, 429, too large), rejected (400, 413), failed (503: the store failed), overloaded (503: over --max-memory), deferred (504 after --timeout or 502 after a broken call, the key kept claimed), unkeyed (sent upstream without a key).",
		}, []string{"outcome"}),
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dedup_proxy_stored_bytes_total",
			Help: "Bytes of responses stored (status, headers, body).",
		}),
		upstream: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dedup_proxy_upstream_seconds",
			Help:    "Latency of upstream calls.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	for o := idempotency.Unkeyed; int(o) < outcomeCount; o++ {
		m.byOutcome[o] = m.outcomes.WithLabelValues(o.String())
	}
	return m
}

func (m *proxyMetrics) report(_ *http.Request, o idempotency.Outcome, stored int) {
	if int(o) < outcomeCount && m.byOutcome[o] != nil {
		m.byOutcome[o].Inc()
	} else {
		m.outcomes.WithLabelValues(o.String()).Inc()
	}
	if stored > 0 {
		m.stored.Add(float64(stored))
	}
}

// Describe and Collect make proxyMetrics one prometheus.Collector.
func (m *proxyMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.outcomes.Describe(ch)
	m.stored.Describe(ch)
	m.upstream.Describe(ch)
}

func (m *proxyMetrics) Collect(ch chan<- prometheus.Metric) {
	m.outcomes.Collect(ch)
	m.stored.Collect(ch)
	m.upstream.Collect(ch)
}

// outcomeCount bounds the idempotency.Outcome values (they start at 1).
const outcomeCount = int(idempotency.Deferred) + 1
