package httpidem

import (
	"context"
	"net/http"
	"time"
)

// Store keeps the keys, their answers and the fences. [SQLStore] is the one over
// database/sql, on SQLite and on PostgreSQL.
type Store interface {
	// Claim takes c.Key for one request, in one transaction with the fence check: see
	// [Outcome] for what it may find. A key past its expiry counts as absent.
	Claim(ctx context.Context, c Claim) (Outcome, error)
	// Complete stores the answer of the claim c and marks the key done.
	Complete(ctx context.Context, c Claim, a Answer) error
	// Release drops the claim c, so that the key is absent again.
	Release(ctx context.Context, c Claim) error
}

// Claim is one request's bid for a key.
type Claim struct {
	Key         string    // the key as stored: "<scope>\n<key>" under [WithScope]
	Fingerprint string    // "sha256:<hex>" of the request, see the package doc
	ID          string    // random, tells this claim from a later one of the same key
	Now         time.Time // when the claim is made
	Expires     time.Time // when the key counts as absent again
	Fenced      bool      // Run and Token were sent
	Run         string
	Token       int64
}

// State is what a claim found.
type State int

const (
	// Claimed: the key was absent (or expired) and is now in flight under this claim.
	Claimed State = iota + 1
	// InFlight: another request holds the key and has not answered yet.
	InFlight
	// Done: the key holds an answer, for Outcome.Fingerprint.
	Done
	// FencedOut: the token is below Outcome.Highest; nothing was claimed.
	FencedOut
)

func (s State) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case InFlight:
		return "in_flight"
	case Done:
		return "done"
	case FencedOut:
		return "fenced"
	}
	return "unknown"
}

// Outcome is what [Store.Claim] found.
type Outcome struct {
	State       State
	Fingerprint string // the key's stored fingerprint (InFlight, Done)
	Claim       string // the ID of the claim in flight (InFlight)
	Answer      Answer // the stored answer (Done)
	Highest     int64  // the highest token seen for the run (FencedOut)
}

// Answer is a stored response.
type Answer struct {
	Status int
	Header http.Header // only the headers chosen to be stored
	Body   []byte
}
