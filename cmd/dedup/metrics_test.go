package main

import (
	"testing"

	"github.com/streamdedup/dedup"
)

// TestObservedFPMetrics: the engine's observed false positives are
// exported as two counters (samples and false positives among them, so
// that a rate over any interval can be taken) and the rate since Open;
// the fuse seals as two counters, done and failed.
func TestObservedFPMetrics(t *testing.T) {
	vals := engineMetricValues(dedup.Stats{ObservedFPSamples: 3000, ObservedFPRate: 29.0 / 3000, Seals: 12, SealErrors: 2})
	for name, want := range map[string]float64{
		"dedup_engine_observed_fp_samples_total":      3000,
		"dedup_engine_observed_false_positives_total": 29,
		"dedup_engine_observed_fp_rate":               29.0 / 3000,
		"dedup_engine_seals_total":                    12,
		"dedup_engine_seal_errors_total":              2,
	} {
		if v, ok := vals[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	names := map[string]bool{}
	for _, d := range metricDefs {
		names[d.name] = true
	}
	for name := range vals {
		if !names[name] {
			t.Errorf("%s has no definition in metricDefs", name)
		}
	}
}
