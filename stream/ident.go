package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// sumSpan is how many bytes inputSum hashes at each end of the consumed
// part of an input.
const sumSpan = 4096

// inputSum identifies the first off bytes of the input f by content: a
// hash of their first and their last sumSpan bytes (the same bytes when
// off is small). A log rotated or rewritten under the same name differs
// there, in its first lines or in the lines just before the committed
// offset; hashing only the ends keeps a resume of a large input from
// reading it all again.
func inputSum(f *os.File, off int64) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%d\n", off)
	buf := make([]byte, sumSpan)
	read := func(at int64, n int) error {
		if _, err := f.ReadAt(buf[:n], at); err != nil {
			if err == io.EOF {
				return fmt.Errorf("%s ends before byte %d", f.Name(), at+int64(n))
			}
			return err
		}
		h.Write(buf[:n])
		return nil
	}
	head := min(off, sumSpan)
	if err := read(0, int(head)); err != nil {
		return "", err
	}
	if tail := max(head, off-sumSpan); tail < off {
		if err := read(tail, int(off-tail)); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}
