package bench

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestSimulateReference runs the reference inputs through the engine and
// checks its figures within tolerances set from the sampling error of a run
// of this size (about 720,000 requests, 14,000 duplicates):
//   - keys held: 588,000 ± 3% (the engine retains each key for W ± W/32);
//   - leaks per million: 1,642 ± 10% (one SE is ~3%);
//   - the 99% window: 9.2 min ± 0.6 min (one SE ~0.17 min, plus the
//     0.1-min search step);
//   - the window for < 100 leaks/M: 10.6 min ± 0.8 min (one SE ~0.25 min).
func TestSimulateReference(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15s")
	}
	cfg := SimConfig{}
	cfg.Bimodal.Skip = true
	res, err := Simulate(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Main
	within := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %.4g, model %.4g, tolerance %.3g", name, got, want, tol)
		} else {
			t.Logf("%s = %.4g (model %.4g)", name, got, want)
		}
	}
	within("keys held", m.KeysHeld, Reference.KeysHeld, 0.03*Reference.KeysHeld)
	within("memory MiB", m.MemoryModel/(1<<20), Reference.MemoryMiB, 0.03*Reference.MemoryMiB)
	within("duplicates/s", m.DuplicatesPerSec, Reference.DuplicatesPerSec, 2)
	within("share suppressed", m.ShareSuppressed, Reference.ShareSuppressed, 0.01)
	within("leaks per million", m.LeaksPerMillion, Reference.LeaksPerMillion, 0.10*Reference.LeaksPerMillion)
	within("99% window (min)", res.Window99.Minutes(), Reference.Window99.Minutes(), 0.6)
	within("<100/M window (min)", res.WindowTarget.Minutes(), Reference.WindowTarget.Minutes(), 0.8)
	within("keys at that window", res.RunTarget.KeysHeld, Reference.KeysAtWindowTarget, 0.1*Reference.KeysAtWindowTarget)
	if res.Run99.ShareSuppressed < 0.99 || res.RunTarget.LeaksPerMillion >= 100 {
		t.Errorf("search runs miss their targets: %.4f, %.0f/M", res.Run99.ShareSuppressed, res.RunTarget.LeaksPerMillion)
	}
}

// TestSimulateBimodal checks that no short window catches the replays and
// that exact mode with a retention past the last replay catches them all,
// at a tiny scale.
func TestSimulateBimodal(t *testing.T) {
	cfg := SimConfig{Scale: 0.01, Measure: 20 * time.Minute}
	cfg.Bimodal.Scale = 0.0005
	cfg.Bimodal.Measure = 2 * time.Hour
	cfg.Bimodal.Stream.Delay = DelayOptions{Kind: DelayBimodal, RetryMean: 5 * time.Second, ReplayShare: 0.3, ReplayMin: 30 * time.Minute, ReplayMax: 2 * time.Hour}
	res, err := Simulate(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Bimodal) != 3 {
		t.Fatalf("%d bimodal runs, want 3", len(res.Bimodal))
	}
	for _, r := range res.Bimodal {
		if r.Replays == 0 {
			t.Fatalf("no replays measured: %+v", r)
		}
		long := r.Window >= cfg.Bimodal.Stream.Delay.ReplayMax
		switch {
		case long && (r.Leaked != 0 || r.ReplayShareSuppressed != 1):
			t.Errorf("retention %v: %d leaked, replays suppressed %.3f; want all caught", r.Window, r.Leaked, r.ReplayShareSuppressed)
		case !long && (r.ReplayShareSuppressed != 0 || r.RetryShareSuppressed < 0.99):
			t.Errorf("window %v: replays suppressed %.3f (want 0), retries %.3f (want ~1)", r.Window, r.ReplayShareSuppressed, r.RetryShareSuppressed)
		}
		if r.Mode != "exact" || r.FalseDrops != 0 {
			t.Errorf("window %v: mode %s, %d false drops", r.Window, r.Mode, r.FalseDrops)
		}
	}
}
