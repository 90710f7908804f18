package resp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup/internal/fsperm"
)

// The durable state of a move, so that a node killed at any point of it
// resumes it on restart and loses nothing acknowledged:
//
//   - the source writes DIR/cluster.move-START-END (the target and the
//     move's epoch) before it asks the target to import, and removes it
//     only once the map it saved names the target. A node that restarts
//     with the record and the range still its own in its map serves the
//     range as migrating (keys its engine holds answered here, any other
//     -ASK the target) and drives the move on until the target owns it;
//     a move, once recorded, only goes forward;
//   - the target keeps the range's import table, an engine like any
//     table, under DIR/@import-START-END, with the file source (the
//     source's address) that makes it an import, and keys.log, every key
//     it was sent with -ASK and did not hold yet, appended before it is
//     observed (synced before the reply under FsyncAlways). A target that
//     restarts with them and the range not yet its own imports on; the
//     keys of keys.log are replayed into the range's engine, and
//     committed, before the map saying the range is the target's is
//     written, and the import removed after that.

// moveRecordPrefix names a source's move records under the state root.
const moveRecordPrefix = "cluster.move-"

// importSourceFile and importLogFile are an import's files in its table
// directory.
const (
	importSourceFile = "source"
	importLogFile    = "keys.log"
)

// moveHook, when set (by tests only), is called at each step of a move:
// "migrating", "exported", "finished" on the source, "installed" on the
// target.
var moveHook func(step string)

func hook(step string) {
	if moveHook != nil {
		moveHook(step)
	}
}

// moveRecord is a source's record of a move in progress.
type moveRecord struct {
	start, end int
	target     string
	epoch      int64
}

func moveRecordPath(dir string, start, end int) string {
	return filepath.Join(dir, fmt.Sprintf("%s%d-%d", moveRecordPrefix, start, end))
}

// writeMoveRecord durably records that START-END moves to target.
func writeMoveRecord(dir string, r moveRecord) error {
	p := moveRecordPath(dir, r.start, r.end)
	if err := writeSync(p+".tmp", []byte(fmt.Sprintf("%s %d\n", r.target, r.epoch))); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	return syncDir(dir)
}

// removeMoveRecord removes a move's record once the move is over.
func removeMoveRecord(dir string, start, end int) error {
	if err := os.Remove(moveRecordPath(dir, start, end)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(dir)
}

// readMoveRecords lists the move records under dir.
func readMoveRecords(dir string) ([]moveRecord, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []moveRecord
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), moveRecordPrefix)
		if !ok || strings.HasSuffix(rest, ".tmp") {
			continue
		}
		var r moveRecord
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			_, err = fmt.Sscanf(rest, "%d-%d", &r.start, &r.end)
		}
		if err == nil {
			_, err = fmt.Sscanf(string(b), "%s %d", &r.target, &r.epoch)
		}
		if err == nil {
			err = checkNodeAddr(r.target)
		}
		if err != nil {
			return nil, fmt.Errorf("resp: move record %s: %w", e.Name(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// parseRangeName parses PREFIX-START-END.
func parseRangeName(name, prefix string) (start, end int, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "-")
	s, err1 := strconv.Atoi(a)
	e, err2 := strconv.Atoi(b)
	return s, e, ok && err1 == nil && err2 == nil
}

// openImportLog opens (creating) an import's key log for appending and
// counts the keys it holds.
func openImportLog(dir string) (*os.File, int, error) {
	p := filepath.Join(dir, importLogFile)
	keys, size, err := readImportLog(p)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, fsperm.FileMode)
	if err != nil {
		return nil, 0, err
	}
	// Drop a record a crash cut short, so that the next ones follow the
	// last whole one.
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, len(keys), nil
}

// appendImportLog appends key to an import's log, synced with sync.
func appendImportLog(f *os.File, key []byte, sync bool) error {
	b := binary.AppendUvarint(make([]byte, 0, len(key)+binary.MaxVarintLen64), uint64(len(key)))
	if _, err := f.Write(append(b, key...)); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}

// readImportLog reads an import's key log. A record cut short by a
// crash ends it: the key it held was never answered. It returns the
// keys and the length of the whole records.
func readImportLog(p string) ([][]byte, int64, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var keys [][]byte
	var size int64
	for {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > 1<<30 {
			return keys, size, nil
		}
		k := make([]byte, n)
		if _, err := io.ReadFull(r, k); err != nil {
			return keys, size, nil
		}
		keys = append(keys, k)
		size += int64(len(binary.AppendUvarint(nil, n))) + int64(n)
	}
}

// resumeMove drives a recorded move on until it is over or the server
// shuts down.
func (cl *cluster) resumeMove(rec moveRecord) {
	s := cl.s
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		for {
			cl.moveMu.Lock()
			err := cl.drive(rec)
			cl.moveMu.Unlock()
			if err == nil {
				return
			}
			s.logf("resp: moving slots %d-%d to %s: %v; retrying", rec.start, rec.end, rec.target, err)
			select {
			case <-s.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}
