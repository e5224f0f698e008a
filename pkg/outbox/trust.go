package outbox

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Signed messages. A message queued with SignedBy carries its queuer's signature in the
// identity.HeaderSig header: the queuing service's ed25519 signature, in domain
// identity.DomainOutbox, of the message's subject and body. A sender with a Trust sends a
// message only when the key registered for its signer made the signature and that signer
// may queue it (Trust.May): the service of the step the message names (the compensator for
// an undo's withdrawal), a notice also by the supervisor, a copy queued again by a resume
// (Requeue) by the supervisor only. An unsigned message is accepted only at or below the
// seal's CAIRN_OUTBOX sequence (package identity). Any other is refused before any mark is
// written: rejected on cairn.rejected with its reason and terminated, so it is never sent
// and holds up no message behind it; readers of a run's outbox (Trust.Accepts) leave it out.

// Names of the framework's services that queue messages for steps other than their own.
const (
	Supervisor  = "supervisor"  // notices, and the copies a resume queues again
	Compensator = "compensator" // an undo's withdrawals
	UndoStep    = "undo"        // the step a compensator's message names
)

// Trust is what a reader checks outbox messages against.
type Trust struct {
	Ring *identity.Ring
	// Kinds are the kinds the service of each step queues (besides notices); a step not in
	// it (or a nil map) may queue any kind.
	Kinds map[string][]string
}

// TrustOf is the trust of a service whose checkpoint store is store: its ring; nil when the
// store checks nothing.
func TrustOf(store *kc.Store) *Trust {
	if ring := store.Ring(); ring != nil {
		return &Trust{Ring: ring}
	}
	return nil
}

// May reports why service by may not have queued m (nil: it may).
func (t *Trust) May(m Message, by string) error {
	if m.Requeue > 0 {
		if by == Supervisor {
			return nil
		}
		return fmt.Errorf("%w: %s queued a copy of %q again, which only %s does", identity.ErrNotAllowed, by, m.Key, Supervisor)
	}
	owner := m.Step
	if owner == UndoStep {
		owner = Compensator
	}
	if m.Notice() {
		if by == owner || by == Supervisor {
			return nil
		}
		return fmt.Errorf("%w: %s queued a %s notice of step %s", identity.ErrNotAllowed, by, m.Kind, m.Step)
	}
	if by != owner {
		return fmt.Errorf("%w: %s queued message %q of step %s, which only %s queues", identity.ErrNotAllowed, by, m.Key, m.Step, owner)
	}
	if kinds, ok := t.Kinds[m.Step]; ok && !slices.Contains(kinds, m.Kind) {
		return fmt.Errorf("%w: step %s queues %v, not %s", identity.ErrNotAllowed, m.Step, kinds, m.Kind)
	}
	return nil
}

// Check is nil when t accepts m, stored at seq as msg; else an error wrapping ErrForged.
// A nil t accepts everything.
func (t *Trust) Check(ctx context.Context, msg *nats.Msg, seq uint64, m Message) error {
	if t == nil || t.Ring == nil {
		return nil
	}
	by, err := t.Ring.VerifyMsg(ctx, identity.DomainOutbox, msg, seq, t.Ring.Seal().Outbox)
	if err == nil && by != "" {
		err = t.May(m, by)
	}
	if err != nil && identity.Refused(err) {
		return fmt.Errorf("%w: message %q at %s sequence %d: %w", ErrForged, m.Key, DefaultStream, seq, err)
	}
	if err != nil {
		return fmt.Errorf("checking the signature of %q: %w", m.Key, err) // the keys could not be read: later
	}
	return nil
}

// check is Check for a message the sender consumes.
func (t *Trust) check(ctx context.Context, msg jetstream.Msg, m Message) error {
	if t == nil {
		return nil
	}
	var seq uint64
	if meta, err := msg.Metadata(); err == nil {
		seq = meta.Sequence.Stream
	}
	return t.Check(ctx, &nats.Msg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()}, seq, m)
}

// QueueOption says how Queue queues.
type QueueOption func(*queueOptions)

type queueOptions struct {
	signer *identity.Signer
	space  assets.Space
}

// In queues in space sp (a hosted pipeline's own outbox: its stream CAIRN_<NAME>_OUTBOX,
// subjects cairn.<name>.outbox.<run_id>.<kind>), not the default space's.
func In(sp assets.Space) QueueOption {
	return func(o *queueOptions) { o.space = sp }
}

// SignedBy signs the message as sg (nil: unsigned).
func SignedBy(sg *identity.Signer) QueueOption {
	return func(o *queueOptions) { o.signer = sg }
}
