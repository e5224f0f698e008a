package ledgerapi

// The problem types of the service, as RFC 9457 "type" members (the middleware's are
// httpidem's Type constants).
const (
	TypeFenceMissing = "https://github.com/cairnhq/cairn/blob/main/README.md#ledger-fence-missing"
	TypeForeignEpoch = "https://github.com/cairnhq/cairn/blob/main/README.md#ledger-foreign-epoch"
	TypeBadEntry     = "https://github.com/cairnhq/cairn/blob/main/README.md#ledger-bad-entry"
	TypeRefused      = "https://github.com/cairnhq/cairn/blob/main/README.md#ledger-refused"
	TypeNotFound     = "https://github.com/cairnhq/cairn/blob/main/README.md#ledger-not-found"
	TypeUnavailable  = "https://github.com/cairnhq/cairn/blob/main/README.md#ledger-unavailable"
)

// EpochHeader carries the epoch of the run's fencing token; DefaultEpoch stands for it
// when it is absent.
const (
	EpochHeader  = "Cairn-Fence-Epoch"
	DefaultEpoch = "http"
)
