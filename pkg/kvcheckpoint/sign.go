package kvcheckpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/pkg/identity"
)

// Signed records. A Store with a signer (WithSigner, As) signs every record it writes: sig
// is {by, sig}, the writing service's ed25519 signature of the record's sum, which covers
// everything else. A Store with a ring (WithRing) checks every record it reads, after
// the sum (Decode) and before anything is done with it (Check): the signature must be the
// registered key's of the service it names, and that service must be one that may leave the
// record as it stands (Allowed). A record that fails is ErrCorrupt (and ErrForged), so every
// reader already treats it as a damaged one: never acted on nor written, the run handed over
// by its note alone, the entry kept for a person. An unsigned record is accepted only at or
// below the seal's revision (package identity): one the previous release wrote.

// maxSigner is the longest signer name a record's signature may carry.
const maxSigner = 24

// signatureRoom is what a signature adds to an unsigned record's encoding, at most:
// ,"sig":{"by":"…","sig":"…"} (86 characters of unpadded base64). The record names the
// signer, not its key: a reader takes the key registered for that name, and a key in the
// record would only take the room of an inline output.
const signatureRoom = len(`,"sig":{"by":"","sig":""}`) + maxSigner + 86

// sign returns the JSON of sg's signature of r's sum, set on r; nil when sg is nil.
func sign(r *Record, sg *identity.Signer) []byte {
	if sg == nil {
		return nil
	}
	sig := sg.Sign(identity.DomainRecord, []byte(r.Sum))
	sig.Key = "" // the reader takes the registered key of sig.By
	r.Sig = &sig
	b, _ := json.Marshal(sig) // two strings
	return b
}

// sig reads a record's signature: null, or an object of two strings.
func (d *decoder) sig(p **identity.Sig) bool {
	if d.null() {
		*p = nil
		return true
	}
	s := &identity.Sig{}
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			*p = s
			return true
		}
		switch string(key) {
		case "by":
			ok = d.str(&s.By)
		case "sig":
			ok = d.str(&s.Sig)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

// Roles names the services whose writes the framework knows: the supervisor (any change:
// starts, commands, handovers, releases), the compensator (undo progress, and the cancel
// an undo makes), the outbox sender (a finishing run made done), and the service of each
// step (StepService; the step's own name when nil).
type Roles struct {
	Supervisor, Compensator, Outbox string
	StepService                     func(step string) string
}

// DefaultRoles are the names Cairn's deployment gives its services.
var DefaultRoles = Roles{Supervisor: "supervisor", Compensator: "compensator", Outbox: "outbox-sender"}

func (ro Roles) step(name string) string {
	if ro.StepService == nil {
		return name
	}
	return ro.StepService(name)
}

// Allowed says whether service by may have written r as it stands: the check is made on the
// record alone, so it admits every state the service's own writes can leave, and no other.
// A step's service may write while it holds the run's lease (the lease names its owner),
// and, with no lease, the record of its step in hand (one that may run now: a failure, a
// handover, a release) or just committed (nothing after it verified), its plan's wait, and
// a finished run's last move; the compensator an undo's progress or a run cancelled for one;
// the outbox sender a run made done; the supervisor anything.
func (ro Roles) Allowed(r *Record, by string) error {
	switch by {
	case ro.Supervisor:
		return nil
	case ro.Compensator:
		if r.Undo != nil || r.Status == Cancelled || r.Status == Undoing || r.Status == Undone {
			return nil
		}
	case ro.Outbox:
		if r.Status == Done || r.Status == Finishing {
			return nil
		}
	}
	if l := r.Lease; l != nil {
		owner, _, _ := strings.Cut(l.Owner, "/")
		if owner == by && (l.Step == "undo" && by == ro.Compensator || ro.step(l.Step) == by) {
			return nil
		}
		return fmt.Errorf("%w: %s signed a record whose lease %s holds for %s", identity.ErrNotAllowed, by, l.Owner, l.Step)
	}
	cur := r.Current()
	may := r.mayRun()
	for i, s := range r.Pipeline {
		if ro.step(s) != by {
			continue
		}
		switch {
		case r.Step(s).Status != Verified && may[i], // its step in hand
			r.Step(s).Status == Verified && justCommitted(r, s), // its commit
			r.Approval != nil && r.Approval.Step == s:           // its plan
			return nil
		}
	}
	return fmt.Errorf("%w: %s signed a record of %s at step %q (status %s)", identity.ErrNotAllowed, by, r.RunID, cur, r.Status)
}

// justCommitted reports whether verified step s may be the last step committed: no step
// that waits for it is verified yet, and, when every step is (a finishing run settled),
// no step waits for it at all. For steps run one after another: the step before the
// current one, or the last.
func justCommitted(r *Record, s string) bool {
	deps := r.Dependents(s)
	for _, d := range deps {
		if r.Step(d).Status == Verified {
			return false
		}
	}
	return len(deps) > 0 || r.AllVerified()
}

// WithSigner makes the store sign every record it writes as sg.
func WithSigner(sg *identity.Signer) Option { return func(s *Store) { s.signer = sg } }

// WithRing makes the store check every record it reads against ring's keys and roles
// (DefaultRoles unless WithRoles).
func WithRing(ring *identity.Ring) Option { return func(s *Store) { s.ring = ring } }

// WithRoles sets who may write what (Allowed).
func WithRoles(ro Roles) Option { return func(s *Store) { s.roles = ro } }

// As returns a store over the same bucket, sharing this one's memory of its writes, that
// signs what it writes as sg: one per service of a process.
func (s *Store) As(sg *identity.Signer) *Store {
	c := &Store{nc: s.nc, kv: s.kv, stream: s.stream, bucket: s.bucket, epoch: s.epoch, now: s.now, api: s.api, steps: s.steps,
		conflicts: s.conflicts, written: s.written, signer: sg, ring: s.ring, roles: s.roles, mover: s.mover}
	return c
}

// Signer is who the store signs as (nil: it writes unsigned records).
func (s *Store) Signer() *identity.Signer { return s.signer }

// Ring is the ring the store checks what it reads against (nil: none): the one a service
// checks its other reads with too (saga records, outbox messages).
func (s *Store) Ring() *identity.Ring { return s.ring }

// Check verifies r, read at revision rev, as every read of the store does: nil without a
// ring; else its signature and its signer's role, or an unsigned record at or below the
// seal. A failure is ErrCorrupt and ErrForged. A watcher that decodes entries itself calls
// it.
func (s *Store) Check(ctx context.Context, r *Record, rev uint64) error {
	if s.ring == nil {
		return nil
	}
	if r.Sig == nil {
		if rev != 0 && rev <= s.ring.Seal().Runs {
			return nil // written by the previous release, before the keys (package identity)
		}
		return fmt.Errorf("checkpoint %q at revision %d: %w: %w: %w", r.RunID, rev, ErrCorrupt, ErrForged, identity.ErrUnsigned)
	}
	if len(r.Sig.By) > maxSigner {
		return fmt.Errorf("checkpoint %q: %w: %w: signer name of %d bytes", r.RunID, ErrCorrupt, ErrForged, len(r.Sig.By))
	}
	if err := s.ring.Verify(ctx, identity.DomainRecord, []byte(r.Sum), r.Sig); err != nil {
		return fmt.Errorf("checkpoint %q: %w: %w: %w", r.RunID, ErrCorrupt, ErrForged, err)
	}
	if err := s.roles.Allowed(r, r.Sig.By); err != nil {
		return fmt.Errorf("checkpoint %q: %w: %w: %w", r.RunID, ErrCorrupt, ErrForged, err)
	}
	return nil
}

// EncodeSigned is Encode, signed by sg: the bytes a Store with that signer writes.
func EncodeSigned(r *Record, sg *identity.Signer) ([]byte, error) { return encode(r, sg) }
