package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// chunkReader returns its data in reads of the given sizes, cycling.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n = max(1, r.sizes[r.i%len(r.sizes)])
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// readAll reads every command of data through a reqReader fed in reads of
// sizes, and returns them quoted, one per line, ending with the error.
func readAll(t testing.TB, data []byte, sizes []int, lim reqLimits) (string, int) {
	var out bytes.Buffer
	rd := newReqReader(&chunkReader{data: data, sizes: sizes}, lim, nil)
	peak := 0
	for {
		args, err := rd.next(func() error { return nil })
		peak = max(peak, len(rd.buf))
		if err != nil {
			var pe *protoError
			if errors.As(err, &pe) {
				fmt.Fprintf(&out, "error: %s\n", pe.msg)
			} else if err != io.EOF {
				t.Fatalf("read error %v", err)
			}
			return out.String(), peak
		}
		fmt.Fprintf(&out, "%q\n", args)
	}
}

// FuzzReqReader: whatever a client sends, the reader does not panic, reads
// the same commands and the same refusal however the bytes are split into
// reads, and keeps its buffer within what the limits admit for one
// command.
func FuzzReqReader(f *testing.F) {
	for _, s := range []string{
		"PING\r\n", "*1\r\n$4\r\nPING\r\n", "*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n*0\r\n*-1\r\nPING\r\n",
		"SET \"a\\x41\\n\" 'b\\'c' NX\r\n", "*\x00payload", "*1\r\r\r\r", "$-----", "*1\r\n$-1\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nvXX", "\r\n\r\n", "*99999999999999999999\r\n", "\"unbalanced\r\n",
	} {
		f.Add([]byte(s), uint8(1), uint8(7))
	}
	lim := reqLimits{maxArgSize: 1000, maxArgs: 50, maxCommandSize: 4000}
	f.Fuzz(func(t *testing.T, data []byte, a, b uint8) {
		whole, _ := readAll(t, data, nil, lim)
		split, peak := readAll(t, data, []int{int(a), int(b)}, lim)
		if whole != split {
			t.Fatalf("read whole:\n%s\nread in pieces of %d and %d:\n%s", whole, a, b, split)
		}
		// One command: its arguments, a header per argument, and a read.
		bound := int(lim.maxCommandSize) + int(lim.maxArgs+1)*(maxHeader+2) + maxInline + 2*readSize
		if peak > bound {
			t.Fatalf("read buffer grew to %d bytes, over %d", peak, bound)
		}
	})
}

// TestSmallCommandAfterAManyArgumentOne pins that the command after one of
// many arguments is served: the reader lets a large argument array go
// after such a command, and the small command parsed next is still
// returned, not skipped as an empty one: a PING after an EXISTS of 700
// keys gets its reply.
func TestSmallCommandAfterAManyArgumentOne(t *testing.T) {
	for _, n := range []int{100, 700, 5000} {
		var b bytes.Buffer
		fmt.Fprintf(&b, "*%d\r\n$6\r\nEXISTS\r\n", n+1)
		for i := range n {
			k := fmt.Sprintf("k%08d", i)
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(k), k)
		}
		b.WriteString("*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n")
		lim := reqLimits{maxArgSize: 1 << 20, maxArgs: 1 << 20, maxCommandSize: 64 << 20}
		rd := newReqReader(bytes.NewReader(b.Bytes()), lim, nil)
		noFlush := func() error { return nil }
		args, err := rd.next(noFlush)
		if err != nil || len(args) != n+1 {
			t.Fatalf("n=%d: first command: %d args, %v; want %d", n, len(args), err, n+1)
		}
		for _, want := range []string{"PING", "ECHO hi"} {
			args, err := rd.next(noFlush)
			if got := string(bytes.Join(args, []byte(" "))); err != nil || got != want {
				t.Fatalf("n=%d: after the large command: %q, %v; want %q", n, got, err, want)
			}
		}
	}
}
