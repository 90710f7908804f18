package handover

import "errors"

// Errors. Test with [errors.Is].
var (
	// ErrDamaged marks an export that cannot be used as it is: a file
	// missing, of the wrong size or checksum, or a manifest that does not
	// decode.
	ErrDamaged = errors.New("handover: damaged export")
	// ErrNotFound is returned by [Store.Latest] when the partition has no
	// export at all.
	ErrNotFound = errors.New("handover: no export")
	// ErrStale is returned by [Store.Latest] when every export of the
	// partition lies ahead of the offset asked for.
	ErrStale = errors.New("handover: no export at or before the offset")
)
