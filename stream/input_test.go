package stream

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReaderBatches cuts random inputs with small chunks and slow readers,
// with and without extraction workers, and checks every line, offset and
// line number, and over-long lines.
func TestReaderBatches(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 3))
		var in bytes.Buffer
		var lines []string
		for i := range 200 {
			n := r.IntN(40)
			if r.IntN(20) == 0 {
				n = 100 + r.IntN(300) // over maxLine below
			}
			l := strings.Repeat(string(rune('a'+i%26)), n)
			lines = append(lines, l)
			in.WriteString(l)
			if i < 199 || seed%2 == 0 {
				in.WriteByte('\n')
			}
		}
		const maxLine = 80
		x := mustExtractor(t, KeyConfig{Format: "lines", MaxLine: maxLine})
		var src io.Reader = bytes.NewReader(in.Bytes())
		switch seed % 3 {
		case 1:
			src = iotest.OneByteReader(src)
		case 2:
			src = iotest.HalfReader(src)
		}
		full := make(chan *batch, 2)
		free := make(chan *batch, 3)
		for range 3 {
			free <- &batch{}
		}
		// Up to three workers extract keys: batches keep their order.
		rd := &reader{srcs: []source{{name: "t", r: src, line: 1}}, x: x, chunk: 16 + int(seed), full: full, free: free, done: make(chan struct{}),
			workers: 1 + int(seed%4)}
		go rd.run()
		li, off := 0, int64(0)
		ended := false
		for b := range full {
			if b.err != nil {
				t.Fatal(b.err)
			}
			if b.off != off || b.firstLine != int64(li+1) {
				t.Fatalf("seed %d: batch at %d line %d, want %d line %d", seed, b.off, b.firstLine, off, li+1)
			}
			ri := 0
			for i, ln := range b.lines {
				want := lines[li]
				got := string(b.buf[ln.start:ln.end])
				if len(want) > maxLine {
					if ri >= len(b.rejects) || int(b.rejects[ri].line) != i || b.rejects[ri].r.code != rejLineTooLong {
						t.Fatalf("seed %d line %d: %d bytes not rejected", seed, li+1, len(want))
					}
					ri++
					if !strings.HasPrefix(want, got) {
						t.Fatalf("seed %d line %d: shows %q", seed, li+1, got)
					}
				} else if got != want {
					t.Fatalf("seed %d line %d: %q, want %q", seed, li+1, got, want)
				} else if want == "" {
					ri++ // rejected as an empty key
				}
				off += int64(len(want)) + 1
				if li == len(lines)-1 && seed%2 == 1 {
					off--
				}
				if b.off+ln.next != off {
					t.Fatalf("seed %d line %d: next %d, want %d", seed, li+1, b.off+ln.next, off)
				}
				li++
			}
			if ri != len(b.rejects) {
				t.Fatalf("seed %d: %d rejects, %d expected", seed, len(b.rejects), ri)
			}
			ended = ended || b.endFile
			free <- b
		}
		if li != len(lines) || !ended || off != int64(in.Len()) {
			t.Fatalf("seed %d: %d lines to offset %d (end %v), want %d to %d", seed, li, off, ended, len(lines), in.Len())
		}
	}
}

// errReader fails after its data.
type errReader struct{ r io.Reader }

func (e errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, fmt.Errorf("disk on fire")
	}
	return n, err
}

func TestReaderError(t *testing.T) {
	x := mustExtractor(t, KeyConfig{Format: "lines"})
	full := make(chan *batch, 4)
	free := make(chan *batch, 4)
	for range 4 {
		free <- &batch{}
	}
	rd := &reader{srcs: []source{{name: "t", r: errReader{strings.NewReader("a\nb\nc")}, line: 1}}, x: x, chunk: 4096, full: full, free: free, done: make(chan struct{}), workers: 2}
	go rd.run()
	var lines int
	var err error
	for b := range full {
		lines += len(b.lines)
		if b.err != nil {
			err = b.err
		}
	}
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || lines < 2 {
		t.Fatalf("lines %d, err %v", lines, err)
	}
}
