package resp

import "errors"

// ErrBadSlotMap wraps every reason [ParseSlotMap] refuses a slot map.
var ErrBadSlotMap = errors.New("resp: bad cluster slot map")

// Sentinel errors.
var (
	// ErrInvalidOptions wraps every field [Options.Validate] rejects.
	ErrInvalidOptions = errors.New("resp: invalid options")
	// ErrServerClosed is returned by [Server.Serve] after [Server.Shutdown].
	ErrServerClosed = errors.New("resp: server closed")
	// ErrTableOptions is returned by [New] when the default table on disk
	// was created with a window kind ([TableOptions.Refresh]) other than
	// the server's.
	ErrTableOptions = errors.New("resp: the default table's options differ")
)

// Sentinel errors of backups.
var (
	// ErrBackupDisabled is returned by [Server.Backup] of a server without
	// [Options.BackupDir]: a client never chooses where the server writes.
	ErrBackupDisabled = errors.New("resp: backups are off: start the server with a backup directory (dedup serve --backup-dir DIR); backups are written only there")
	// ErrBackupRunning is returned by [Server.Backup] while another backup
	// of the server runs.
	ErrBackupRunning = errors.New("resp: Background save already in progress")
	// ErrBadBackupName is returned by [Server.Backup] for a name that is
	// not one plain file name under the backup directory.
	ErrBadBackupName = errors.New("resp: invalid backup name")
)
