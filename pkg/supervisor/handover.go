package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/internal/intents"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/saga"
)

// Handover reasons, the label of cairn_handovers_total.
const (
	reasonStall           = "stall"
	reasonReassignLimit   = "reassign_limit"
	reasonMaxDeliveries   = "max_deliveries"
	reasonApprovalTimeout = "approval_timeout"
	reasonOutboxStall     = "outbox_stall"
	reasonOutboxRefused   = "outbox_refused"
	reasonForeignInbox    = "foreign_inbox"
)

// handOver stops a run the supervisor gave up on: the note first, then the record (status
// handed_over, the step failed, any lease released) in one compare-and-set. A live holder's
// later writes are refused by the record and the fences. It does nothing when the run is no
// longer running or finishing, or when only says the record moved on (only returns false).
func (s *Supervisor) handOver(ctx context.Context, runID, step, reason string, cause error, only func(r *kc.Record) bool) error {
	rec, rev0, err := s.cfg.Store.Load(ctx, runID)
	if err != nil {
		return err
	}
	if !handable(rec) || (only != nil && !only(rec)) {
		return nil
	}
	if len(rec.Commands) > 0 {
		// Named first, so the note's cut error keeps them.
		cause = fmt.Errorf("commands left for a person: %s; %w", named(rec.Commands), cause)
	}
	id := handover.ID(runID, cmpStep(step), reason)
	if reason == reasonOutboxStall || reason == reasonOutboxRefused {
		// Mail can stop a run again after each resume: each such handover notifies.
		id += fmt.Sprintf(":%d", rev0)
	}
	note := handover.Note{
		ID: id, RunID: runID, Step: step,
		Error: cut(cause.Error(), kc.MaxLastError), NextAction: handover.ResumeOrUndo(runID, s.cfg.Space.RunArg(runID)),
		At: s.stamp(),
		// What the record knows: the verified steps' keys and messages, and the loop
		// guard's last count of the stopped step (the supervisor reads no outside system).
		Done: handover.DoneOf(rec, s.cfg.Pipeline, step, nil),
	}
	if err := handover.Put(ctx, s.cfg.Handovers, note); err != nil {
		return err
	}
	open, counted := s.intentsOpen(ctx, rec, step)
	_, rev, err := s.cfg.Store.MutateFrom(ctx, rec, rev0, runID, func(r *kc.Record) error {
		if !handable(r) || (only != nil && !only(r)) {
			return kc.ErrSkip
		}
		r.Status = kc.HandedOver
		r.Lease = nil
		r.Commands = []kc.Command{} // the note names them (the cause says which): a person decides
		if step != "" && r.Index(step) >= 0 {
			st := r.Step(step)
			st.Status = kc.Failed
			st.SetLastError(cause.Error())
			st.SetIntentsOpen(open, counted)
		}
		handover.Name(r, note)
		return nil
	})
	if errors.Is(err, kc.ErrSkip) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recording the handover of %s: %w", runID, err)
	}
	s.forget(runID)
	if s.cfg.Notify != nil {
		s.cfg.Notify(ctx, "handover", note, rec.Generation, 0)
	}
	s.cfg.Metrics.Handovers.WithLabelValues(cmpStep(step), reason).Inc()
	s.record(ctx, events.AuditStepID(runID, cmpStep(step), "handover", rev), events.Audit{RunID: runID, Step: step, Event: "handover", Detail: cut(cause.Error(), 512)})
	s.log.Error("run handed over", slog.String("run_id", runID), slog.String("step", step), slog.String("reason", reason), slog.Any("error", cause))
	return nil
}

// handable: a run the supervisor may hand over: one that runs, or a stopped one whose
// commands wait for a lease that is never freed.
func handable(r *kc.Record) bool {
	switch r.Status {
	case kc.Running, kc.Finishing, kc.WaitingApproval:
		return true
	case kc.Undoing:
		return false
	}
	return len(r.Commands) > 0
}

func cmpStep(step string) string {
	if step == "" {
		return "run"
	}
	return step
}

// reassignments counts the run's reassigned events since it was last resumed: a run that
// keeps losing its workers is handed over instead of looping.
func (s *Supervisor) reassignments(ctx context.Context, runID string) (int, error) {
	evs, err := events.ReadSubject(ctx, s.cfg.JS, s.cfg.Space.Stream(assets.StreamAudit), s.cfg.Space.Audit(runID))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range evs {
		var a events.Audit
		if e.Unmarshal(&a) != nil {
			continue
		}
		switch a.Event {
		case "reassigned":
			n++
		case "run.resumed", "run.rerun", "step.progressed":
			// A step whose restart found more made durable is not looping (the runner's
			// loop guard judges the one that makes none).
			n = 0
		}
	}
	return n, nil
}

// maxDeliveries is the part of the server's max-deliveries advisory the supervisor reads.
type maxDeliveries struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// deadMessage reads a max-deliveries advisory m about stream and the message it names; ok
// is false when the advisory is unreadable or the message was settled or removed meanwhile.
func (s *Supervisor) deadMessage(ctx context.Context, m *nats.Msg, stream string) (maxDeliveries, jetstream.Stream, *jetstream.RawStreamMsg, bool) {
	var adv maxDeliveries
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		s.log.Warn("unreadable max-deliveries advisory", slog.String("data", cut(string(m.Data), 200)))
		return adv, nil, nil, false
	}
	st, err := s.cfg.JS.Stream(ctx, stream)
	if err != nil {
		s.log.Warn("max-deliveries advisory", slog.Any("error", err))
		return adv, nil, nil, false
	}
	raw, err := st.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		return adv, nil, nil, false // settled or removed in the meantime
	}
	return adv, st, raw, true
}

// AdvisorySubject is where the server announces step events that reached their delivery
// limit, in the default space (another space's: its MaxDeliveries(assets.StreamSteps)).
var AdvisorySubject = assets.Default.MaxDeliveries(assets.StreamSteps)

// onMaxDeliveries hands over the run of a step event that reached MaxDeliver without being
// answered (a worker that dies on it every time), then removes the event: JetStream has no
// dead-letter queue, the handover note is where the evidence goes.
func (s *Supervisor) onMaxDeliveries(ctx context.Context, m *nats.Msg) {
	adv, stream, raw, ok := s.deadMessage(ctx, m, s.cfg.Space.Stream(assets.StreamSteps))
	if !ok {
		return
	}
	step, runID, ok := stepSubject(s.cfg.Space, raw.Subject)
	if !ok {
		return
	}
	cause := fmt.Errorf("the event of step %s was delivered %d times (max deliver) and never answered: a worker may die on it every time", step, adv.Deliveries)
	err := s.handOver(ctx, runID, step, reasonMaxDeliveries, cause, func(r *kc.Record) bool {
		return r.Status == kc.Running && r.Index(step) >= 0 && r.Step(step).Status != kc.Verified
	})
	if err != nil {
		s.log.Warn("handing over after max deliveries", slog.String("run_id", runID), slog.Any("error", err))
		return
	}
	if err := stream.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		s.log.Warn("removing a step event past its delivery limit", slog.Uint64("seq", adv.StreamSeq), slog.Any("error", err))
	}
}

// stepSubject splits sp's cairn.step.<step>.<run_id>.
func stepSubject(sp assets.Space, subject string) (step, runID string, ok bool) {
	rest, found := strings.CutPrefix(subject, sp.StepPrefix())
	if !found {
		return "", "", false
	}
	step, runID, ok = strings.Cut(rest, ".")
	return step, runID, ok && step != "" && runID != ""
}

// intentsOpen counts the saga intents without an outcome of the step a handover fails, for
// its effects.intents_open: a step whose attempts died recorded none itself. Only a step
// that writes outside has any; a read that fails leaves the field as it was.
func (s *Supervisor) intentsOpen(ctx context.Context, rec *kc.Record, step string) (int, bool) {
	if def, ok := s.cfg.Pipeline.Step(step); !ok || !def.Writes() || rec.Step(step).Status == kc.Verified {
		return 0, false
	}
	rctx, cancel := context.WithTimeout(ctx, intents.CountTimeout)
	defer cancel()
	t, err := saga.ReadTally(rctx, s.cfg.JS, s.cfg.Space, intents.Trust(s.cfg.Store), rec.RunID, step, rec.Generation)
	if err != nil {
		s.log.Warn("intents_open not counted", slog.String("run_id", rec.RunID), slog.Any("error", err))
		return 0, false
	}
	return t.Open(), true
}
