package saga

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
)

// Signed records. A record published with SignedBy carries its writer's signature in the
// identity.HeaderSig header: the writing service's ed25519 signature, in domain
// identity.DomainSaga, of the record's subject and body. A reader with a Trust accepts a
// record only when the key registered for its signer made the signature and that signer is
// the one that writes the records of the record's step (Trust.Writer): the service of the
// step that made the effect, the compensator for an undo's. An unsigned record is accepted
// only at or below the seal's CAIRN_SAGA sequence (package identity): the previous
// release's. Any other record is Forged: never acted on nor counted, and kept on the stream
// for a person.

// Trust is what a reader checks saga records against.
type Trust struct {
	Ring *identity.Ring
	// Writer is the service that writes the records of step; nil: the step's own name, and
	// Compensator for the undo's.
	Writer func(step string) string
}

// Compensator is the service that writes the records of an undo (step UndoStep), by default.
const Compensator = "compensator"

// UndoStep is the step name of an undo's records.
const UndoStep = "undo"

func (t *Trust) writer(step string) string {
	if t.Writer != nil {
		return t.Writer(step)
	}
	if step == UndoStep {
		return Compensator
	}
	return step
}

// Forged is a record a reader refused: where it is, and why.
type Forged struct {
	Seq     uint64
	Subject string
	Key     string // the record's key, when its body decoded
	Reason  string
	Msg     *nats.Msg // as stored, for a rejection
}

// check is nil when t accepts r, stored as s.
func (t *Trust) check(ctx context.Context, sp assets.Space, s events.Stored, r Record) error {
	if want := sp.Saga(r.RunID, r.Step); s.Msg.Subject != want || s.Event.Subject != r.RunID {
		return fmt.Errorf("%w: a record of run %q, step %q on %s (ce-subject %q)", identity.ErrNotAllowed, r.RunID, r.Step, s.Msg.Subject, s.Event.Subject)
	}
	by, err := t.Ring.VerifyMsg(ctx, identity.DomainSaga, s.Msg, s.Seq, t.Ring.Seal().Saga)
	if err != nil {
		return err
	}
	if by == "" {
		return nil // the previous release's, at or below the seal
	}
	if w := t.writer(r.Step); by != w {
		return fmt.Errorf("%w: %s signed a record of step %s, which only %s writes", identity.ErrNotAllowed, by, r.Step, w)
	}
	return nil
}

// decode reads the record of s, checked against t (nil: unchecked); a record t refuses, or
// whose body does not decode when t is set, is returned as forged.
func (t *Trust) decode(ctx context.Context, sp assets.Space, s events.Stored) (Record, *Forged, error) {
	var r Record
	if err := s.Event.Unmarshal(&r); err != nil {
		if t == nil {
			return Record{}, nil, fmt.Errorf("saga record %s: %w", s.Event.ID, err)
		}
		return Record{}, &Forged{Seq: s.Seq, Subject: s.Msg.Subject, Reason: err.Error(), Msg: s.Msg}, nil
	}
	if t == nil || t.Ring == nil {
		return r, nil, nil
	}
	if err := t.check(ctx, sp, s, r); err != nil {
		if !identity.Refused(err) {
			return Record{}, nil, fmt.Errorf("checking saga record %s: %w", s.Event.ID, err) // the keys could not be read: read again later
		}
		return Record{}, &Forged{Seq: s.Seq, Subject: s.Msg.Subject, Key: r.Key,
			Reason: fmt.Sprintf("saga record %s at %s sequence %d: %v", r.Key+":"+r.Phase, "CAIRN_SAGA", s.Seq, err), Msg: s.Msg}, nil
	}
	return r, nil, nil
}

// PublishOption says how Publish publishes.
type PublishOption func(*publishOptions)

type publishOptions struct {
	signer *identity.Signer
	space  assets.Space
}

// In publishes in space sp (a pipeline's own saga), not the default.
func In(sp assets.Space) PublishOption {
	return func(o *publishOptions) { o.space = sp }
}

// SignedBy signs the record as sg (nil: unsigned).
func SignedBy(sg *identity.Signer) PublishOption {
	return func(o *publishOptions) { o.signer = sg }
}
