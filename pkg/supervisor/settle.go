package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
func Settle(ctx context.Context, js jetstream.JetStream, sp assets.Space, store *kc.Store, marks jetstream.KeyValue, runID string, now func() time.Time) (bool, error) {
	rec, _, err := store.Load(ctx, runID)
	if err != nil {
		return false, err
	}
	if rec.Status != kc.Finishing {
		return rec.Status == kc.Done, nil
	}
	pending, queued, err := Undelivered(ctx, js, sp, outbox.TrustOf(store), marks, rec)
	if err != nil || len(pending) > 0 {
		return false, err
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
	_ = audit.New(js, "supervisor", now).In(sp).Record(ctx, events.AuditStepID(runID, "run", "done", rev), events.Audit{RunID: runID, Event: "run.done", Attrs: map[string]string{"messages": fmt.Sprint(queued)}})
	return true, nil
}

// Queued lists the messages queued for a run on space sp's outbox (CAIRN_OUTBOX for
// assets.Default) that trust accepts (all with a nil trust): a forged message, which the
// sender refuses, is left out, so it is never waited for, withdrawn or queued again.
func Queued(ctx context.Context, js jetstream.JetStream, sp assets.Space, trust *outbox.Trust, runID string) ([]outbox.Message, error) {
	evs, err := events.ReadStored(ctx, js, sp.Stream(assets.StreamOutbox), sp.Outbox(runID, ">"))
	if err != nil {
		return nil, fmt.Errorf("listing the outbox of %q: %w", runID, err)
	}
	out := make([]outbox.Message, 0, len(evs))
	for _, ev := range evs {
		var m outbox.Message
		if ev.Event.Unmarshal(&m) != nil {
			m = outbox.Message{Key: ev.Event.ID, RunID: runID}
		}
		if err := trust.Check(ctx, ev.Msg, ev.Seq, m); errors.Is(err, outbox.ErrForged) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("listing the outbox of %q: %w", runID, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// Pending is a message of a run that is not marked sent or cancelled yet.
type Pending struct {
	Message outbox.Message // its newest copy on CAIRN_OUTBOX
	Mark    outbox.Mark    // "" (not claimed yet), sending or refused
}

// Undelivered lists, in key order, the messages of rec's generation that have no sent or
// cancelled mark, and counts the messages of the run queued in all (copies included): those
// trust accepts (Queued).
func Undelivered(ctx context.Context, js jetstream.JetStream, sp assets.Space, trust *outbox.Trust, marks jetstream.KeyValue, rec *kc.Record) ([]Pending, int, error) {
	msgs, err := Queued(ctx, js, sp, trust, rec.RunID)
	if err != nil {
		return nil, 0, err
	}
	newest := map[string]outbox.Message{}
	for _, m := range msgs {
		if m.Generation != rec.Generation {
			continue
		}
		if o, ok := newest[m.Key]; !ok || m.Token > o.Token || (m.Token == o.Token && m.Requeue >= o.Requeue) {
			newest[m.Key] = m
		}
	}
	var out []Pending
	for _, key := range slices.Sorted(maps.Keys(newest)) {
		mark, err := outbox.MarkOf(ctx, marks, rec.RunID, key)
		if err != nil {
			return nil, 0, err
		}
		if mark != outbox.Sent && mark != outbox.Cancelled {
			out = append(out, Pending{Message: newest[key], Mark: mark})
		}
	}
	return out, len(msgs), nil
}

// Requeue queues again, each as a copy of its own (outbox.Message.Requeue = rev), the
// messages of rec's generation that were refused (their marks reopened first) or never
// claimed, and returns their keys. A message with a sending mark is left alone: its copy is
// still on the outbox-sender durable, which never gives a message up. The marks make a
// requeued message go once, whichever copy a sender takes first. Only the messages store's
// ring accepts are queued again, signed by store's signer.
func Requeue(ctx context.Context, js jetstream.JetStream, sp assets.Space, store *kc.Store, marks jetstream.KeyValue, rec *kc.Record, rev uint64) ([]string, error) {
	pending, _, err := Undelivered(ctx, js, sp, outbox.TrustOf(store), marks, rec)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, p := range pending {
		if p.Mark == outbox.Sending {
			continue
		}
		if p.Mark == outbox.Refused {
			if _, err := outbox.Reopen(ctx, marks, rec.RunID, p.Message.Key); err != nil {
				return keys, err
			}
		}
		m := p.Message
		m.Requeue = rev
		if err := outbox.Queue(ctx, js, m, outbox.SignedBy(store.Signer()), outbox.In(sp)); err != nil {
			return keys, fmt.Errorf("queueing %q again: %w", m.Key, err)
		}
		keys = append(keys, m.Key)
	}
	return keys, nil
}

// requeueOnResume queues the undelivered messages of a handed-over run whose steps are all
// verified again, before the resume sets it finishing (so the sweep never sees a refused mark
// on a resumed run). A replayed command requeues nothing.
func (s *Supervisor) requeueOnResume(ctx context.Context, requestID, runID string) error {
	rec, rev, err := s.cfg.Store.Load(ctx, runID)
	if err != nil || rec.Status != kc.HandedOver || rec.Current() != "" || rec.HasRequest(requestID) {
		return nil // the resume itself reports what it finds
	}
	keys, err := Requeue(ctx, s.cfg.JS, s.cfg.Space, s.cfg.Store, s.cfg.Marks, rec, rev)
	if len(keys) > 0 {
		s.record(ctx, events.AuditStepID(runID, "run", "outbox.requeued", rev), events.Audit{RunID: runID, Event: "outbox.requeued", Detail: cut(strings.Join(keys, ", "), 512)})
	}
	if err != nil {
		return fmt.Errorf("resume of %s: %w", runID, err)
	}
	return nil
}

// sweepFinishing settles a finishing run, or hands it over: at once when a message was
// refused for good, and when messages are still undelivered CAIRN_OUTBOX_STALL after the
// run's last progress, a message delivered counting as progress.
func (s *Supervisor) sweepFinishing(ctx context.Context, w watched) error {
	runID := w.rec.RunID
	pending, _, err := Undelivered(ctx, s.cfg.JS, s.cfg.Space, outbox.TrustOf(s.cfg.Store), s.cfg.Marks, w.rec)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		_, err := Settle(ctx, s.cfg.JS, s.cfg.Space, s.cfg.Store, s.cfg.Marks, runID, s.cfg.Now)
		return err
	}
	unchanged := w.unchanged
	var refused []Pending
	for _, p := range pending {
		if p.Mark == outbox.Refused {
			refused = append(refused, p)
		}
	}
	if len(refused) > 0 {
		why := s.refusals(ctx, runID)
		parts := make([]string, 0, len(refused))
		for _, p := range refused {
			parts = append(parts, p.Message.Key+" ("+cmp.Or(why[p.Message.Key], "refused by the outside system")+")")
		}
		cause := fmt.Errorf("outbox message refused for good: %s; fix the cause, then cairn resume %s sends it again", strings.Join(parts, "; "), runID)
		return s.handOver(ctx, runID, "", reasonOutboxRefused, cause, unchanged)
	}
	if waited := s.cfg.Now().Sub(s.mailProgress(runID, len(pending), w.progress.began())); waited >= s.cfg.OutboxStall {
		keys := make([]string, 0, len(pending))
		for _, p := range pending {
			// The run's own prefix is left out, so the note names every key within its limit.
			keys = append(keys, strings.TrimPrefix(p.Message.Key, runID+":"))
		}
		cause := fmt.Errorf("%d outbox messages of %s undelivered for %s (CAIRN_OUTBOX_STALL %s), still retried; cairn resume %s once they can go: %s",
			len(pending), runID, waited.Round(time.Second), s.cfg.OutboxStall, runID, strings.Join(keys, ", "))
		return s.handOver(ctx, runID, "", reasonOutboxStall, cause, unchanged)
	}
	return nil
}

// refusals reads the errors the outbox sender recorded (outbox.refused audit events) for the
// run's messages, the newest for each key.
func (s *Supervisor) refusals(ctx context.Context, runID string) map[string]string {
	out := map[string]string{}
	evs, err := events.ReadSubject(ctx, s.cfg.JS, s.cfg.Space.Stream(assets.StreamAudit), s.cfg.Space.Audit(runID))
	if err != nil {
		return out
	}
	for _, e := range evs {
		var a events.Audit
		if e.Unmarshal(&a) == nil && a.Event == EventOutboxRefused && a.Item != "" {
			out[a.Item] = a.Detail
		}
	}
	return out
}

// EventOutboxRefused is the audit event the outbox sender's host records for a message the
// outside system refused for good (Item the key, Detail the error); a handover names it.
const EventOutboxRefused = "outbox.refused"

// mailProgress is when a finishing run last made progress: began (its record's), or later,
// when a sweep found fewer of its messages undelivered than the sweep before. Mail going out
// one message at a time is progress, however long all of it takes.
func (s *Supervisor) mailProgress(runID string, pending int, began time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.mail[runID]
	if ok && pending < d.pending {
		d.fell = s.cfg.Now()
	}
	d.pending = pending
	s.mail[runID] = d
	if d.fell.After(began) {
		return d.fell
	}
	return began
}
