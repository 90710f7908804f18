package stream

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
)

// checkpointFormat tags the checkpoints this command commits, so that a
// state directory written by another client of the engine is recognised.
const checkpointFormat = "dedup-filter/1"

// checkpoint is what `dedup filter` commits with the engine: the position
// of the job in its inputs and the lengths of its outputs at the moment
// the keys observed so far became durable. It is JSON (see the package
// doc for the fields); it is small and written once per commit.
type Checkpoint struct {
	Format string `json:"format"`
	// The job: absolute paths of the inputs ("-" for stdin) and outputs
	// ("-" for stdout, "" when absent). A run resumes only the job it is.
	Inputs  []string `json:"inputs"`
	Out     string   `json:"out"`
	Dups    string   `json:"dups,omitempty"`
	Rejects string   `json:"rejects,omitempty"`
	// State is the absolute path of the state directory at the commit.
	// A state moved since (a restore elsewhere, a renamed tree) takes a
	// path of the job at the same place relative to State as the one
	// this run names (see moveTo). Absent in checkpoints written before
	// it was recorded.
	State string `json:"state,omitempty"`

	// Position: Inputs[File] has been consumed up to byte Offset, which is
	// the start of its line number Line (1-based). At the end of the last
	// input, the position stays there (its size), so that a later run
	// reads what was appended.
	File   int   `json:"file"`
	Offset int64 `json:"offset"`
	Line   int64 `json:"line"`

	// Identity of Inputs[File] at the commit, so that a run does not read
	// another file from this Offset (a rotated log, a file rewritten in
	// place): its inode and device, and Sum, a hash of its bytes before
	// Offset (see inputSum). Absent for stdin and other streams, and in
	// checkpoints written before they were recorded.
	Ino uint64 `json:"ino,omitempty"`
	Dev uint64 `json:"dev,omitempty"`
	Sum string `json:"sum,omitempty"`

	// Read identifies Inputs[:File] as they were when read to their end
	// (zero for stdin and other streams), so that a run over a rotated log
	// tells the files it read from the others (see locate). Absent in
	// checkpoints written before it was recorded.
	Read []FileMark `json:"read,omitempty"`

	// Lengths in bytes of the output files at the commit.
	OutLen     int64 `json:"out_len"`
	DupsLen    int64 `json:"dups_len,omitempty"`
	RejectsLen int64 `json:"rejects_len,omitempty"`

	// Counters of the job up to this position.
	Counts Counts `json:"counts"`
}

// FileMark identifies a file read up to byte Offset: its inode, and Sum,
// inputSum of its bytes before Offset.
type FileMark struct {
	Ino    uint64 `json:"ino,omitempty"`
	Offset int64  `json:"offset"`
	Sum    string `json:"sum,omitempty"`
}

// counts are the job's counters.
type Counts struct {
	Events     int64 `json:"events"` // lines read, rejects included
	Distinct   int64 `json:"distinct"`
	Duplicates int64 `json:"duplicates"`
	Rejects    int64 `json:"rejects"`
	Bytes      int64 `json:"bytes"` // input bytes consumed
}

func (c *Checkpoint) encode() []byte {
	c.Format = checkpointFormat
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // strings and integers only: cannot fail
	}
	return b
}

// DecodeCheckpoint decodes a checkpoint a stream filter committed with
// its engine ([dedup.Engine.Checkpoint]); one it did not write is an
// error matching [ErrForeignCheckpoint].
func DecodeCheckpoint(b []byte) (Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: %v", ErrForeignCheckpoint, err)
	}
	if c.Format != checkpointFormat {
		return c, fmt.Errorf("%w: format %q", ErrForeignCheckpoint, c.Format)
	}
	if c.File < 0 || c.File > len(c.Inputs) || c.Offset < 0 || c.Line < 1 || len(c.Read) > c.File ||
		c.OutLen < 0 || c.DupsLen < 0 || c.RejectsLen < 0 {
		return c, fmt.Errorf("%w: position out of range", ErrForeignCheckpoint)
	}
	return c, nil
}

// sameJob reports whether c was committed by a run of the job j.
func (c *Checkpoint) sameJob(j *Checkpoint) bool {
	return slices.Equal(c.Inputs, j.Inputs) && c.sameOutputs(j)
}

// sameOutputs reports whether c was committed by a run writing the
// outputs of the job j.
func (c *Checkpoint) sameOutputs(j *Checkpoint) bool {
	return c.Out == j.Out && c.Dups == j.Dups && c.Rejects == j.Rejects
}

// moveTo adapts c, read from the state directory now at state (absolute),
// to a move of the whole job: when c was committed with the state at
// another path, each of c's paths that, taken at the same place relative
// to the state, is the path the job j names becomes j's. The identity of
// the position's input is then its bytes alone (its inode is another
// file's). It returns the paths moved, as "old -> new".
func (c *Checkpoint) moveTo(state string, j *Checkpoint) []string {
	if c.State == "" || c.State == state {
		return nil
	}
	var moved []string
	move := func(p *string, now string) bool {
		if *p == "" || *p == "-" || *p == now {
			return false
		}
		rel, err := filepath.Rel(c.State, *p)
		if err != nil || filepath.Join(state, rel) != now {
			return false
		}
		moved = append(moved, *p+" -> "+now)
		*p = now
		return true
	}
	if len(c.Inputs) == len(j.Inputs) {
		for i := range c.Inputs {
			if move(&c.Inputs[i], j.Inputs[i]) {
				if i == c.File {
					c.Ino, c.Dev = 0, 0
				}
				if i < len(c.Read) {
					c.Read[i].Ino = 0
				}
			}
		}
	}
	move(&c.Out, j.Out)
	move(&c.Dups, j.Dups)
	move(&c.Rejects, j.Rejects)
	c.State = state
	return moved
}
