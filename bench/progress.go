package bench

// Progress receives progress updates from long runs. The command shows
// them as a progress bar; tests pass nil.
type Progress interface {
	// Stage starts a new stage of total units of work.
	Stage(name string, total int64)
	// Add reports n more units done.
	Add(n int64)
}

type nopProgress struct{}

func (nopProgress) Stage(string, int64) {}
func (nopProgress) Add(int64)           {}

func orNop(p Progress) Progress {
	if p == nil {
		return nopProgress{}
	}
	return p
}
