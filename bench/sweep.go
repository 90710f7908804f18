package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// SweepPoint is one backend at one false-positive target, filled with
// SweepKeys keys over one window.
type SweepPoint struct {
	Backend     string  `json:"backend"`
	TargetFP    float64 `json:"target_fp"`
	MeasuredFP  float64 `json:"measured_fp"`
	Keys        uint64  `json:"keys"`
	FilterBytes uint64  `json:"filter_bytes"`
	BytesPerKey float64 `json:"bytes_per_key"`
}

// MemorySweep measures, for each backend and false-positive target, the
// filter bytes per key and the false-positive rate met: a probabilistic
// in-memory engine takes keys distinct keys over one window, then as many
// fresh keys again probe it. A bits-and-blooms filter sized directly is
// added as backend "bits-and-blooms direct" for reference.
func MemorySweep(ctx context.Context, filters []string, fps []float64, keys int, progress Progress) ([]SweepPoint, error) {
	progress = orNop(progress)
	progress.Stage("memory sweep", int64(len(filters)*len(fps)*2*keys))
	const window = 100 * time.Second
	var out []SweepPoint
	sc := StreamOptions{Seed: 7, Rate: float64(keys) / window.Seconds(), DuplicateFraction: 1e-9, Keys: KeysUUID, Events: int64(2 * keys)}
	for _, f := range filters {
		for _, fp := range fps {
			if ctx.Err() != nil {
				return out, fmt.Errorf("bench: memory sweep: %w", ctx.Err())
			}
			p, err := sweepPoint(sc, f, fp, keys, window)
			if err != nil {
				return out, err
			}
			out = append(out, p)
			progress.Add(int64(2 * keys))
		}
	}
	for _, fp := range fps {
		bf := bloom.NewWithEstimates(uint(keys), fp)
		out = append(out, SweepPoint{
			Backend: "bits-and-blooms direct", TargetFP: fp, MeasuredFP: bloom.EstimateFalsePositiveRate(bf.Cap(), bf.K(), uint(keys)),
			Keys: uint64(keys), FilterBytes: uint64(bf.Cap() / 8), BytesPerKey: float64(bf.Cap()) / 8 / float64(keys),
		})
	}
	return out, nil
}

func sweepPoint(sc StreamOptions, filter string, fp float64, keys int, window time.Duration) (p SweepPoint, err error) {
	clk := NewVirtualClock(simEpoch)
	t, err := OpenEngine(EngineOptions{
		Probabilistic: true, Filter: filter, Window: window, ExpectedRate: sc.Rate,
		FalsePositiveRate: fp, Shards: 1, ManualCommit: true,
	}, clk)
	if err != nil {
		return p, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	st, err := NewStream(sc)
	if err != nil {
		return p, err
	}
	const batch = 1024
	ks := make([][]byte, 0, batch)
	dup := make([]bool, batch)
	var ev Event
	var probes, falsePos uint64
	n := 0
	flush := func(probe bool) error {
		if len(ks) == 0 {
			return nil
		}
		if err := t.Check(ks, time.Time{}, dup[:len(ks)]); err != nil {
			return err
		}
		if probe {
			for _, d := range dup[:len(ks)] {
				probes++
				if d {
					falsePos++
				}
			}
		}
		ks = ks[:0]
		return nil
	}
	for st.Next(&ev) {
		probe := n >= keys
		if n == keys {
			if err := flush(false); err != nil {
				return p, err
			}
			// Probes stay in flight: they never reach the filters, so
			// every probe meets the filters at their designed fill.
			if err := t.Commit(); err != nil {
				return p, err
			}
			u, err := t.Usage()
			if err != nil {
				return p, err
			}
			p.Keys, p.FilterBytes = u.Keys, u.FilterBytes
		}
		if len(ks) == 0 {
			// Probes all run at the end of the window, against every key.
			clk.Set(min(ev.At, window-time.Millisecond))
		}
		ks = append(ks, ev.Key)
		n++
		if len(ks) == batch {
			if err := flush(probe); err != nil {
				return p, err
			}
			if !probe {
				if err := t.Commit(); err != nil {
					return p, err
				}
			}
		}
	}
	if err := flush(true); err != nil {
		return p, err
	}
	p.Backend, p.TargetFP = filter, fp
	if probes > 0 {
		p.MeasuredFP = float64(falsePos) / float64(probes)
	}
	if p.Keys > 0 {
		p.BytesPerKey = float64(p.FilterBytes) / float64(p.Keys)
	}
	return p, nil
}
