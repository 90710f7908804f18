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
	sf := f.filter.Load()
	size := sf.InputSize()
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(f.env.stderr),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(20),
		progressbar.OptionThrottle(progressEvery/2),
		progressbar.OptionSetPredictTime(size > 0),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSpinnerType(14),
	)
	// The bar's clock starts now, with the reading: left to start at its
	// first update, 250 ms into the run, it divided the bytes read by the
	// time since that update, and showed "(221 GB/s)" for a run shorter
	// than that.
	bar.StartWithoutRender()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		start := time.Now()
		// update shows the figures so far; the last line, at quit, too.
		update := func() {
			cn := sf.Counts()
			ev := cn.Events
			dup := 0.0
			if ev > 0 {
				dup = 100 * float64(cn.Duplicates) / float64(ev)
			}
			st := f.eng.Stats()
			rate := float64(ev) / time.Since(start).Seconds()
			bar.Describe(fmt.Sprintf("%s ev/s, %.1f%% dup, %d lookups", humanize.Count(math.Round(rate)), dup, st.StoreLookups))
			_ = bar.Set64(cn.Bytes)
		}
		for {
			select {
			case <-quit:
				update()
				_ = bar.Finish()
				fmt.Fprintln(f.env.stderr)
				return
			case <-t.C:
				update()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
