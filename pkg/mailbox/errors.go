package mailbox

import "errors"

// ErrDrift means the mailbox changed under the run: the folder is gone or was recreated
// (another UIDVALIDITY), or a message of the snapshot was removed or no longer carries the
// attachment it had. The error names the folder, the UID, the attachment and both digests
// or validities. Mail that arrived after the freeze is never drift.
var ErrDrift = errors.New("mailbox changed under the run")

// ErrConfig means a setting the package needs is missing or wrong; the error names it.
var ErrConfig = errors.New("invalid mailbox config")

// ErrNotFrozen means a Read asked for a message or attachment the snapshot does not hold.
var ErrNotFrozen = errors.New("not in the snapshot")
