package saga

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
)

// Phases of a record.
const (
	Intent  = "intent"
	Outcome = "outcome"
)

// Mail is the system of an effect that is a message through the outbox (package outbox);
// a pipeline names its other systems itself (Reverse.System), and its compensator knows
// how to reverse what each holds.
const Mail = "mail"

// Reverse says how to reverse an effect: the write to make in System, under Key.
type Reverse struct {
	System  string          `json:"system"`
	Key     string          `json:"key"`
	Payload json.RawMessage `json:"payload"`
}

// Record is one saga record: the intent of an effect, or its outcome.
type Record struct {
	Key        string `json:"key"`
	RunID      string `json:"run_id"`
	Step       string `json:"step"`
	Generation int    `json:"generation"`
	Token      uint64 `json:"token"`
	Phase      string `json:"phase"`
	// Attrs are the effect's attributes as its pipeline names them (a customer, a region),
	// which an undo's scope selects by (Scope.Where).
	Attrs   map[string]string `json:"attrs,omitempty"`
	Payload json.RawMessage   `json:"payload"`
	// Digest is the digest of the effect's payload as its writer defines it (a message's is
	// outbox.Digest), on an intent; empty when the outside system compares payloads itself.
	// Two intents of one key with different digests are two different effects (Refuses).
	Digest  string   `json:"digest,omitempty"`
	Reverse *Reverse `json:"reverse"` // nil: the effect is itself a reversal, never reversed
	Outcome string   `json:"outcome,omitempty"`
}

// Publish stores r on cairn.saga.<run_id>.<step> (in its space, In) and waits for the stream's ack. Its
// Msg-Id is "<key>:<phase>", so a repeat within the duplicate window is dropped. With
// SignedBy, the record carries its writer's signature (trust.go).
func Publish(ctx context.Context, js jetstream.JetStream, source string, now time.Time, r Record, opts ...PublishOption) error {
	var o publishOptions
	for _, opt := range opts {
		opt(&o)
	}
	id := r.Key + ":" + r.Phase
	e, err := events.New(id, events.TypeSaga, source, r.RunID, now, r)
	if err != nil {
		return fmt.Errorf("saga record %s: %w", id, err)
	}
	m, err := events.Encode(o.space.Saga(r.RunID, r.Step), e)
	if err != nil {
		return fmt.Errorf("saga record %s: %w", id, err)
	}
	if o.signer != nil {
		o.signer.SignMsg(identity.DomainSaga, m)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("saga record %s: %w", id, err)
	}
	return nil
}

// Effect is one outside effect of a run as its records tell it.
type Effect struct {
	Intent  Record
	Outcome string // "" when the effect's outcome was never recorded
	Seq     int    // order of the intent among the run's records
}

// Effects reads a run's records and folds them into its effects, one per key, in the order
// their intents were first recorded. With a trust, the records it refuses are left out of
// the effects and returned as forged, in stream order.
func Effects(ctx context.Context, js jetstream.JetStream, sp assets.Space, trust *Trust, runID string) ([]Effect, []Forged, error) {
	evs, err := events.ReadStored(ctx, js, sp.Stream(assets.StreamSaga), sp.Saga(runID, "*"))
	if err != nil {
		return nil, nil, err
	}
	byKey := map[string]*Effect{}
	var order []string
	var forged []Forged
	for i, e := range evs {
		r, bad, err := trust.decode(ctx, sp, e)
		if err != nil {
			return nil, nil, err
		}
		if bad != nil {
			forged = append(forged, *bad)
			continue
		}
		ef, ok := byKey[r.Key]
		if !ok && r.Phase == Intent {
			ef = &Effect{Intent: r, Seq: i}
			byKey[r.Key] = ef
			order = append(order, r.Key)
		}
		if ok && r.Phase == Outcome {
			ef.Outcome = r.Outcome
		}
	}
	out := make([]Effect, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, forged, nil
}

// Scope narrows an undo to the effects whose attributes match every pair of Where and,
// when Step is set, to that step's; the empty scope is the whole run.
type Scope struct {
	Where map[string]string `json:"where,omitempty"`
	Step  string            `json:"step,omitempty"`
}

// Empty reports whether the scope is the whole run.
func (s Scope) Empty() bool { return len(s.Where) == 0 && s.Step == "" }

// Selects reports whether the scope takes r's effect.
func (s Scope) Selects(r Record) bool {
	if s.Step != "" && r.Step != s.Step {
		return false
	}
	for k, v := range s.Where {
		if got, ok := r.Attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Plan returns the effects an undo of scope reverses, in the order it reverses them: steps in
// reverse pipeline order, keys descending within a step. Effects that are themselves
// reversals are left out.
func Plan(effects []Effect, pipeline []string, scope Scope) []Effect {
	var out []Effect
	for _, e := range effects {
		if e.Intent.Reverse == nil || !scope.Selects(e.Intent) {
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b Effect) int {
		if d := slices.Index(pipeline, b.Intent.Step) - slices.Index(pipeline, a.Intent.Step); d != 0 {
			return d
		}
		return strings.Compare(b.Intent.Key, a.Intent.Key)
	})
	return out
}
