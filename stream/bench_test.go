package stream

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/streamdedup/dedup/internal/benchinput"
	"github.com/streamdedup/dedup/internal/cputime"
)

// BenchmarkReadExtract measures the command's own input path: reading,
// cutting lines and extracting keys, without the engine. It is the
// ceiling of the command on this input.
func BenchmarkReadExtract(b *testing.B) {
	size := min(benchinput.Size(b), 256<<20)
	in := filepath.Join(b.TempDir(), "bench.ndjson")
	benchinput.Write(b, in, size)
	fi, err := os.Stat(in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	x := mustExtractor(b, KeyConfig{Format: "json", Key: "event_id"})
	cpu0 := cputime.Process()
	for b.Loop() {
		f, err := os.Open(in)
		if err != nil {
			b.Fatal(err)
		}
		full := make(chan *batch, 3)
		free := make(chan *batch, 4)
		for range 4 {
			free <- &batch{}
		}
		rd := &reader{srcs: []source{{name: in, r: f, line: 1}}, x: x, chunk: 256 << 10, full: full, free: free, done: make(chan struct{})}
		go rd.run()
		keys := 0
		for bt := range full {
			keys += len(bt.keys)
			free <- bt
		}
		f.Close()
		if keys == 0 {
			b.Fatal("no keys")
		}
	}
	benchinput.ReportCPU(b, cpu0, fi.Size()*int64(b.N))
}
