// Command soak runs the engine at a fixed event rate for a long time with a
// short window, so that generations rotate every few seconds, and samples
// its memory and disk use every second: once the window is full both must
// stay flat, and expired generations must leave no files behind.
//
//	go run ./cmd/soak                 # 10 minutes, writes cmd/soak/RESULTS.md and soak.png
//	go run ./cmd/soak -duration=1m    # a quick look
//
// It is a benchmark-style run, not a test: CI does not run it.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/procmem"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type sample struct {
	t                              float64 // seconds since start
	rss, heap, filter              float64 // bytes
	store, snaps                   float64 // bytes on disk: exact store (Stats.DiskBytes), snapshot folder
	dirBytes                       float64 // bytes of the whole state directory
	files, snapFiles, gens         int
	filterKeys, observed, inflight float64
}

func main() {
	duration := flag.Duration("duration", 10*time.Minute, "how long to run")
	rate := flag.Int("rate", 20000, "events per second")
	dupShare := flag.Float64("dup", 0.3, "share of events that repeat a recent key")
	window := flag.Duration("window", 30*time.Second, "Options.Window")
	gens := flag.Int("gens", 8, "Options.Generations")
	autoCommit := flag.Duration("autocommit", 100*time.Millisecond, "Options.AutoCommit")
	snapEvery := flag.Duration("snapshot", 5*time.Second, "Options.SnapshotInterval")
	filterKind := flag.String("filter", "blocked", "Options.Filter")
	dir := flag.String("dir", "", "state directory (default: a temporary one, removed at the end)")
	out := flag.String("out", "cmd/soak", "folder for RESULTS.md and soak.png")
	flag.Parse()

	stateDir := *dir
	if stateDir == "" {
		d, err := os.MkdirTemp("", "dedup-soak-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		stateDir = filepath.Join(d, "state")
	}
	e, err := dedup.Open(dedup.Options{
		Dir: stateDir, Window: *window, Generations: *gens, Filter: *filterKind,
		ExpectedRate: float64(*rate) * (1 - *dupShare), AutoCommit: *autoCommit, SnapshotInterval: *snapEvery,
	})
	if err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	var samples []sample
	var news, dups, inflightV, errs uint64
	r := rand.New(rand.NewPCG(1, 2))
	// recent holds the keys of the last second or so, for repeats.
	recent := make([][]byte, 0, *rate)
	const tick = 10 * time.Millisecond
	perTick := *rate / int(time.Second/tick)
	batch := make([][]byte, perTick)
	verdicts := make([]dedup.Verdict, perTick)
	next := 0
	tk := time.NewTicker(tick)
	defer tk.Stop()
	sampleAt := start.Add(time.Second)
	lastLog := start
	for now := range tk.C {
		if now.Sub(start) >= *duration {
			break
		}
		for i := range batch {
			if len(recent) > 0 && r.Float64() < *dupShare {
				batch[i] = recent[r.IntN(len(recent))]
				continue
			}
			next++
			k := strconv.AppendInt([]byte("event-"), int64(next), 10)
			batch[i] = k
			if len(recent) < cap(recent) {
				recent = append(recent, k)
			} else {
				recent[r.IntN(len(recent))] = k
			}
		}
		if err := e.ObserveBatch(batch, verdicts); err != nil {
			errs++
			continue
		}
		for _, v := range verdicts {
			switch v {
			case dedup.New:
				news++
			case dedup.Duplicate:
				dups++
			case dedup.InFlight:
				inflightV++
			}
		}
		if now.After(sampleAt) {
			sampleAt = sampleAt.Add(time.Second)
			samples = append(samples, take(e, stateDir, start))
			if now.Sub(lastLog) >= 30*time.Second {
				lastLog = now
				s := samples[len(samples)-1]
				log.Printf("t=%3.0fs rss=%.1fMB heap=%.1fMB filters=%.2fMB store=%.2fMB snapshots=%.2fMB files=%d gens=%d",
					s.t, s.rss/1e6, s.heap/1e6, s.filter/1e6, s.store/1e6, s.snaps/1e6, s.files, s.gens)
			}
		}
	}
	st := e.Stats()
	final := take(e, stateDir, start)
	if err := e.Close(); err != nil {
		log.Printf("close: %v", err)
	}
	leftovers, segs := staleSegments(filepath.Join(stateDir, dedup.SnapshotDir), *window, *gens)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	png := filepath.Join(*out, "soak.png")
	if err := plotSamples(samples, *window, png); err != nil {
		log.Fatal(err)
	}
	report := results(samples, final, st, *duration, *rate, *dupShare, *window, *gens, *autoCommit, *snapEvery, *filterKind,
		news, dups, inflightV, errs, leftovers, segs)
	if err := os.WriteFile(filepath.Join(*out, "RESULTS.md"), []byte(report), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(report)
}

func take(e *dedup.Engine, dir string, start time.Time) sample {
	st := e.Stats()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := sample{
		t: time.Since(start).Seconds(), rss: rss(), heap: float64(ms.HeapInuse), filter: float64(st.FilterBytes),
		store: float64(st.DiskBytes), gens: st.Generations, filterKeys: float64(st.FilterKeys),
		observed: float64(st.Observed), inflight: float64(st.InFlightKeys),
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		s.files++
		s.dirBytes += float64(info.Size())
		if filepath.Base(filepath.Dir(p)) == dedup.SnapshotDir {
			s.snapFiles++
			s.snaps += float64(info.Size())
		}
		return nil
	})
	return s
}

// rss is this process's resident set in bytes, NaN where it cannot be
// read.
func rss() float64 {
	m, err := procmem.Read(0)
	if err != nil {
		return math.NaN()
	}
	return float64(m.RSS)
}

// staleSegments counts snapshot segments of generations that had expired
// by the end of the run (older than the oldest live one, with one span of
// slack for the fallback snapshot), out of all segments.
func staleSegments(dir string, window time.Duration, gens int) (stale, total int) {
	names, _ := os.ReadDir(dir)
	span := window / time.Duration(gens)
	oldest := uint64((time.Now().UnixNano() - int64(window)) / int64(span))
	for _, n := range names {
		// segment-<S>-<gen>-<shard>.seg
		parts := strings.Split(strings.TrimSuffix(n.Name(), ".seg"), "-")
		if !strings.HasSuffix(n.Name(), ".seg") || len(parts) != 4 {
			continue
		}
		total++
		if g, err := strconv.ParseUint(parts[2], 10, 64); err == nil && g+1 < oldest {
			stale++
		}
	}
	return stale, total
}

// flatness compares the mean of the first and last thirds of the samples
// taken once the window is full (after two windows): the relative growth.
func flatness(samples []sample, window time.Duration, f func(sample) float64) (first, last, growth, lo, hi float64) {
	var steady []float64
	for _, s := range samples {
		if s.t >= 2*window.Seconds() {
			steady = append(steady, f(s))
		}
	}
	if len(steady) < 3 {
		return 0, 0, 0, 0, 0
	}
	third := len(steady) / 3
	mean := func(xs []float64) float64 {
		var sum float64
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs))
	}
	first, last = mean(steady[:third]), mean(steady[len(steady)-third:])
	return first, last, (last - first) / first, slices.Min(steady), slices.Max(steady)
}

func results(samples []sample, final sample, st dedup.Stats, duration time.Duration, rate int, dup float64,
	window time.Duration, gens int, autoCommit, snapEvery time.Duration, kind string,
	news, dups, inflightV, errs uint64, stale, segs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Soak results\n\n")
	fmt.Fprintf(&b, "`go run ./cmd/soak` (this file and `soak.png` are its output), run on %s, %s/%s, %d CPUs (shared machine).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(&b, "Workload: %v at %d events/s (%.0f%% repeats of recent keys), Window %v, %d generations (rotation every %v), filter %s, AutoCommit %v, SnapshotInterval %v, real clock, state on the local disk.\n\n",
		duration, rate, 100*dup, window, gens, window/time.Duration(gens), kind, autoCommit, snapEvery)
	fmt.Fprintf(&b, "Verdicts: %d new, %d duplicate, %d in-flight, %d batch errors; %d commits (%d failed), %d snapshots (%d failed); mean commit %v, max %v.\n\n",
		news, dups, inflightV, errs, st.Commits, st.CommitErrors, st.Snapshots, st.SnapshotErrors, st.CommitLatencyMean, st.CommitLatencyMax)
	fmt.Fprintf(&b, "Flatness once the window is full (samples after %v; mean of the first third vs the last third of them):\n\n", 2*window)
	fmt.Fprintf(&b, "| metric | first third | last third | growth | min | max |\n|---|---|---|---|---|---|\n")
	rows := []struct {
		name string
		f    func(sample) float64
	}{
		{"RSS (MB)", func(s sample) float64 { return s.rss / 1e6 }},
		{"Go heap in use (MB)", func(s sample) float64 { return s.heap / 1e6 }},
		{"filters, Stats.FilterBytes (MB)", func(s sample) float64 { return s.filter / 1e6 }},
		{"exact store, Stats.DiskBytes (MB)", func(s sample) float64 { return s.store / 1e6 }},
		{"snapshot folder (MB)", func(s sample) float64 { return s.snaps / 1e6 }},
		{"state directory, all files (MB)", func(s sample) float64 { return s.dirBytes / 1e6 }},
		{"files in the state directory", func(s sample) float64 { return float64(s.files) }},
		{"files in the snapshot folder", func(s sample) float64 { return float64(s.snapFiles) }},
		{"live generations (all shards)", func(s sample) float64 { return float64(s.gens) }},
		{"keys in the filters", func(s sample) float64 { return s.filterKeys }},
	}
	for _, row := range rows {
		first, last, growth, lo, hi := flatness(samples, window, row.f)
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %+.1f%% | %.2f | %.2f |\n", row.name, first, last, 100*growth, lo, hi)
	}
	fmt.Fprintf(&b, "\nAt the end: %d live generations over %d shards (at most %d each), %d filter keys, %.2f MB of filters, %d files in the state directory, %d in the snapshot folder.\n",
		final.gens, 16, gens+1, int64(final.filterKeys), final.filter/1e6, final.files, final.snapFiles)
	fmt.Fprintf(&b, "Snapshot segments of generations expired by the end of the run: %d of %d.\n\n", stale, segs)
	fmt.Fprintf(&b, "![memory and disk over time](soak.png)\n")
	return b.String()
}

func plotSamples(samples []sample, window time.Duration, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("dedup soak: memory and disk (window %v)", window)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "MB"
	p.Legend.Top = true
	p.Legend.Left = true
	series := []struct {
		name string
		f    func(sample) float64
	}{
		{"RSS", func(s sample) float64 { return s.rss / 1e6 }},
		{"Go heap in use", func(s sample) float64 { return s.heap / 1e6 }},
		{"filters", func(s sample) float64 { return s.filter / 1e6 }},
		{"exact store on disk", func(s sample) float64 { return s.store / 1e6 }},
		{"snapshot folder", func(s sample) float64 { return s.snaps / 1e6 }},
	}
	for i, se := range series {
		pts := make(plotter.XYs, len(samples))
		for j, s := range samples {
			pts[j].X, pts[j].Y = s.t, se.f(s)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(se.name, l)
	}
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}
