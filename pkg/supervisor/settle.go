package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// Settle marks a finishing run done when every message its steps queued (of its current
// generation) has a sent or cancelled mark. The outbox sender calls it after each mark, the
// supervisor's sweep too, so a run never waits on a dead sender.
func Settle(ctx context.Context, js jetstream.JetStream, store *kc.Store, marks jetstream.KeyValue, runID string, now func() time.Time) (bool, error) {
	rec, _, err := store.Load(ctx, runID)
	if err != nil {
		return false, err
	}
	if rec.Status != kc.Finishing {
		return rec.Status == kc.Done, nil
	}
	msgs, err := Queued(ctx, js, runID)
	if err != nil {
		return false, err
	}
	for _, m := range msgs {
		if m.Generation != rec.Generation {
			continue
		}
		mark, err := outbox.MarkOf(ctx, marks, runID, m.Key)
		if err != nil {
			return false, err
		}
		if mark != outbox.Sent && mark != outbox.Cancelled {
			return false, nil
		}
	}
	_, rev, err := store.Mutate(ctx, runID, func(r *kc.Record) error {
		if r.Status != kc.Finishing {
			return kc.ErrSkip
		}
		r.Status = kc.Done
		r.NextAction = "nothing: the run is done"
		return nil
	})
	if errors.Is(err, kc.ErrSkip) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_ = audit.New(js, "supervisor", now).Record(ctx, events.AuditStepID(runID, "run", "done", rev), events.Audit{RunID: runID, Event: "run.done", Attrs: map[string]string{"messages": fmt.Sprint(len(msgs))}})
	return true, nil
}

// Queued lists the messages queued for a run on CAIRN_OUTBOX.
func Queued(ctx context.Context, js jetstream.JetStream, runID string) ([]outbox.Message, error) {
	evs, err := events.ReadSubject(ctx, js, assets.StreamOutbox, "cairn.outbox."+runID+".>")
	if err != nil {
		return nil, fmt.Errorf("listing the outbox of %q: %w", runID, err)
	}
	out := make([]outbox.Message, 0, len(evs))
	for _, ev := range evs {
		var m outbox.Message
		if ev.Unmarshal(&m) != nil {
			m = outbox.Message{Key: ev.ID, RunID: runID}
		}
		out = append(out, m)
	}
	return out, nil
}
