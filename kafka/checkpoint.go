package kafka

import (
	"encoding/binary"
	"fmt"
)

// checkpointVersion is the first byte of every checkpoint.
const checkpointVersion = 1

// checkpoint is what an engine commits with its keys: the input offset it
// has processed through (the next offset to read) and the timestamp, in
// Unix milliseconds, of the last record before it (its clock).
type checkpoint struct {
	Offset int64
	Millis int64
}

// encode is the version byte, then Offset and Millis, 8 bytes big-endian
// each.
func (c checkpoint) encode() []byte {
	b := make([]byte, 0, 17)
	b = append(b, checkpointVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Offset))
	return binary.BigEndian.AppendUint64(b, uint64(c.Millis))
}

// decodeCheckpoint decodes b; ok is false for nil (no checkpoint yet).
func decodeCheckpoint(b []byte) (c checkpoint, ok bool, err error) {
	if b == nil {
		return c, false, nil
	}
	if len(b) != 17 || b[0] != checkpointVersion {
		return c, false, fmt.Errorf("%w: %d bytes, version %d", ErrCheckpoint, len(b), firstByte(b))
	}
	c.Offset = int64(binary.BigEndian.Uint64(b[1:9]))
	c.Millis = int64(binary.BigEndian.Uint64(b[9:17]))
	if c.Offset < 0 {
		return c, false, fmt.Errorf("%w: negative offset %d", ErrCheckpoint, c.Offset)
	}
	return c, true, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}
