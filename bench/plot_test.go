package bench

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

func readResult(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestChartsFromRecordedResults draws every chart of dedupbench compare,
// load, serve, advisor and idem from small recorded results
// (testdata/*.json, written by `dedupbench --json`) and checks what a reader needs: both formats
// written, the PNG decodable at its size, the SVG carrying the caption that
// says what was measured, on what machine and when.
func TestChartsFromRecordedResults(t *testing.T) {
	var cmp CompareResult
	readResult(t, "compare.json", &cmp)
	var load LoadResult
	readResult(t, "load.json", &load)
	var serve ServeResult
	readResult(t, "serve.json", &serve)
	var advisor []*AdvisorResult
	readResult(t, "advisor.json", &advisor)
	var idem IdemResult
	readResult(t, "idem.json", &idem)
	if cmp.Machine == nil || len(cmp.Rows) == 0 || len(cmp.Sweep) == 0 || len(cmp.Scale) == 0 || load.Machine == nil || serve.Machine == nil || len(serve.Set) == 0 ||
		len(advisor) < 2 || advisor[0].Machine == nil || len(advisor[0].Runs) < 2 || idem.Machine == nil || len(idem.Rows) < 3 {
		t.Fatal("testdata lacks rows, sweep, scale rows, runs or machine: rerecord it")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		draw  func() ([]string, error)
		files []string
		want  string
	}{
		{"headline", func() ([]string, error) { return PlotHeadline(&cmp, dir) }, []string{"headline"}, "each target in a process of its own"},
		{"scale", func() ([]string, error) { return PlotScale(&cmp, dir) }, []string{"memory_scale"}, "memory at scale"},
		{"sweep", func() ([]string, error) { return PlotMemory(cmp.Sweep, cmp.Machine, dir) }, []string{"memory_per_key"}, "single-probe floor"},
		{"load", func() ([]string, error) { return PlotLoad(&load, dir) }, []string{"load_throughput", "load_latency"}, "dedupbench load"},
		{"serve", func() ([]string, error) { return PlotServe(&serve, dir) }, []string{"serve"}, "redis-benchmark"},
		{"advisor", func() ([]string, error) { return PlotAdvisor(advisor, dir) }, []string{"advisor"}, "estimated (Stats.WindowAdvice)"},
		{"idem", func() ([]string, error) { return PlotIdem(&idem, dir) }, []string{"idem"}, "replays of them per target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := tc.draw()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				for _, ext := range []string{".svg", ".png"} {
					if !slices.Contains(files, filepath.Join(dir, f+ext)) {
						t.Errorf("%s%s not among %q", f, ext, files)
					}
				}
				svg, err := os.ReadFile(filepath.Join(dir, f+".svg"))
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range []string{"<svg", tc.want, "cores of", "load average"} {
					if !bytes.Contains(svg, []byte(w)) {
						t.Errorf("%s.svg lacks %q", f, w)
					}
				}
				raw, err := os.ReadFile(filepath.Join(dir, f+".png"))
				if err != nil {
					t.Fatal(err)
				}
				img, err := png.Decode(bytes.NewReader(raw))
				if err != nil {
					t.Fatalf("%s.png: %v", f, err)
				}
				if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 300 {
					t.Errorf("%s.png is %v: too small to read", f, b)
				}
			}
		})
	}
}

// TestLogTicksLabelEveryDecade pins the labels of a log axis: every decade
// in range has one, the ends included (a sweep down to 0.0001 is labelled
// there).
func TestLogTicksLabelEveryDecade(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{0.0001, 0.1, []string{"0.0001", "0.001", "0.01", "0.1"}},
		{1, 100_000, []string{"1", "10", "100", "1k", "10k", "100k"}},
		{10_000, 10_000_000, []string{"10k", "100k", "1M", "10M"}},
	} {
		var got []string
		for _, tk := range (LogTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ticks over [%g, %g]: labels %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}

// TestBarChartWithMissingValues draws a log bar chart in which a row did
// not run and another has no measurement: a log axis has no zero, so these
// bars are left out with a note instead of breaking the chart.
func TestBarChartWithMissingValues(t *testing.T) {
	p, err := BarChart{Title: "t", Log: true, Ref: 1, Bars: []Bar{
		{Label: "a", Value: 2e6}, {Label: "ref", Value: 4e5}, {Label: "skipped", Note: "not run"}, {Label: "zero"},
	}}.Plot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := (Figure{Panels: []*plot.Plot{p}}).WriteTo(&buf, "svg"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"5.0x", "not run", "1x"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("chart lacks %q", w)
		}
	}
	if _, err := (BarChart{Ref: 3, Bars: []Bar{{Label: "a", Value: 1}}}).Plot(); err == nil {
		t.Error("a reference past the bars: no error")
	}
}

// TestAdvisorAndIdemChartsRefuseEmptyResults: a result with nothing to
// draw is an error naming the chart, not an empty figure.
func TestAdvisorAndIdemChartsRefuseEmptyResults(t *testing.T) {
	dir := t.TempDir()
	if _, err := PlotAdvisor(nil, dir); err == nil || !strings.Contains(err.Error(), "advisor chart") {
		t.Errorf("advisor chart of no results: %v", err)
	}
	if _, err := PlotAdvisor([]*AdvisorResult{{Config: AdvisorConfig{Delay: AdvisorLognormal}}}, dir); err == nil || !strings.Contains(err.Error(), "lognormal") {
		t.Errorf("advisor chart of a result with no runs: %v", err)
	}
	if _, err := PlotIdem(&IdemResult{}, dir); err == nil || !strings.Contains(err.Error(), "idem chart") {
		t.Errorf("idem chart of no rows: %v", err)
	}
}
