package main

import (
	"fmt"
	"math"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/streamdedup/dedup/internal/humanize"
)

// progressEvery is how often the progress bar is refreshed.
const progressEvery = 250 * time.Millisecond

// startProgress shows a progress bar on stderr (bytes of input, with an
// ETA when the input size is known; events/s, duplicate share and store
// lookups in the description) and returns the function that stops it.
func (f *filterRun) startProgress() (stop func()) {
	show := f.cfg.progress == "always" || (f.cfg.progress == "auto" && f.env.stderrTTY)
	if !show {
		return func() {}
	}
	bar := progressbar.NewOptions64(f.totalSize,
		progressbar.OptionSetWriter(f.env.stderr),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(20),
		progressbar.OptionThrottle(progressEvery/2),
		progressbar.OptionSetPredictTime(f.totalSize > 0),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSpinnerType(14),
	)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-quit:
				_ = bar.Set64(f.pub.bytes.Load())
				_ = bar.Finish()
				fmt.Fprintln(f.env.stderr)
				return
			case <-t.C:
			}
			ev := f.pub.events.Load()
			dup := 0.0
			if ev > 0 {
				dup = 100 * float64(f.pub.dups.Load()) / float64(ev)
			}
			st := f.eng.Stats()
			rate := float64(ev) / time.Since(start).Seconds()
			bar.Describe(fmt.Sprintf("%s ev/s, %.1f%% dup, %d lookups", humanize.Count(math.Round(rate)), dup, st.StoreLookups))
			_ = bar.Set64(f.pub.bytes.Load())
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
