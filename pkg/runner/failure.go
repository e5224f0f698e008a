package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/internal/retrypolicy"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// fail ends a leased attempt that did not commit, as its error's class says.
func (r *Runner) fail(ctx context.Context, a *Attempt, h *kc.Holder, err error) settleFunc {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	defer func() { _ = a.batch.Wait(wctx) }()
	switch c := classify(err); c {
	case classFenced:
		r.fenced(wctx, a, err)
		return ack
	case classStopped:
		r.observe(a, "stopped")
		if rerr := h.Release(wctx, func(n *kc.Record) error {
			n.Step(a.Step).Status = kc.Pending
			return nil
		}); rerr != nil {
			a.log.Warn("releasing the lease on stop", slog.Any("error", rerr))
		} else {
			a.log.Info("stopped: lease released, message handed back")
		}
		return nakAfter(time.Second)
	case classTemporary:
		cur, _ := h.Record()
		np, over := r.guardFailure(wctx, a, cur, err)
		if over != nil {
			return r.handover(wctx, a, h, over)
		}
		var attempts int
		open, counted := r.countIntents(wctx, a)
		rerr := h.Release(wctx, func(n *kc.Record) error {
			if np != nil {
				n.Progress = np
			}
			s := n.Step(a.Step)
			s.Status = kc.Pending
			s.Attempts = cur.Step(a.Step).Attempts + 1
			s.SetLastError(err.Error())
			s.SetIntentsOpen(open, counted)
			attempts = s.Attempts
			return nil
		})
		if classify(rerr) == classFenced {
			r.fenced(wctx, a, rerr)
			return ack
		}
		r.auditStep(a, "step.failed", a.Token.Value, err.Error())
		r.observe(a, "temporary")
		r.m.Retries.WithLabelValues(a.Step, "attempt").Inc()
		a.log.Warn("attempt failed, will retry", slog.Int("attempts", attempts), slog.Any("error", err))
		return nakAfter(backoff(attempts))
	default:
		return r.handover(wctx, a, h, err)
	}
}

func backoff(attempts int) time.Duration { return retrypolicy.Attempt().Delay(attempts) }

// fenced: the attempt lost its lease; it writes nothing more and publishes no step event.
func (r *Runner) fenced(ctx context.Context, a *Attempt, err error) {
	r.fencedTotal.Add(1)
	r.m.Fenced.WithLabelValues(a.Step).Inc()
	trace.SpanFromContext(ctx).AddEvent("fenced", trace.WithAttributes(attribute.String("error", err.Error())))
	r.observe(a, "fenced")
	a.log.Warn("fenced", slog.Any("error", err))
	r.auditStep(a, "fenced", a.Token.Value, err.Error())
}

// HandoverNote is what a person reads in cairn-handovers, and what a notifier
// (Config.Notify, app.Notices) is told. Its home is internal/handover, which every service
// that hands a run over writes it through.
type HandoverNote = handover.Note

// handover stops the run and hands it to a person: the note first, then the record (step
// failed, lease released) in one compare-and-set.
func (r *Runner) handover(ctx context.Context, a *Attempt, h *kc.Holder, cause error) settleFunc {
	cur, _ := h.Record()
	note := r.note(cur, a.Step, fmt.Sprintf("%d", a.Token.Value), cause, r.stepProgress(ctx, a))
	if err := handover.Put(ctx, r.cfg.Handovers, note); err != nil {
		a.log.Error("writing handover note", slog.Any("error", err))
		return nakAfter(time.Second)
	}
	open, counted := r.countIntents(ctx, a)
	err := h.Release(ctx, func(n *kc.Record) error {
		n.Status = kc.HandedOver
		if a.guarded != nil {
			n.Progress = a.guarded
		}
		s := n.Step(a.Step)
		s.Status = kc.Failed
		s.SetLastError(cause.Error())
		s.SetIntentsOpen(open, counted)
		handover.Name(n, note)
		return nil
	})
	if classify(err) == classFenced {
		r.fenced(ctx, a, err)
		return ack
	}
	if err != nil {
		a.log.Error("recording the handover", slog.Any("error", err))
		return nakAfter(time.Second)
	}
	r.auditStep(a, "handover", a.Token.Value, cause.Error())
	_ = a.batch.Wait(ctx)
	r.notify(ctx, "handover", note, cur.Generation, a.Token.Value)
	r.m.Handovers.WithLabelValues(a.Step, "step_failed").Inc()
	r.observe(a, "handover")
	trace.SpanFromContext(ctx).SetStatus(codes.Error, "handed over: "+cut(cause.Error(), 200))
	a.log.Error("run handed over", slog.String("note", note.ID), slog.Any("error", cause))
	return ack
}

// note is the handover note of rec's run stopped at step; p is what the step's own writes
// read back (nil: unknown).
func (r *Runner) note(rec *kc.Record, step, tag string, cause error, p *Progress) HandoverNote {
	runID := ""
	if rec != nil {
		runID = rec.RunID
	}
	return HandoverNote{
		ID: handover.ID(runID, step, tag), RunID: runID, Step: step,
		Error: cut(cause.Error(), kc.MaxLastError), Done: handover.DoneOf(rec, r.cfg.Pipeline, step, p.readBack()),
		NextAction: handover.ResumeOrUndo(runID, r.cfg.Space.RunArg(runID)), At: r.stamp(),
	}
}

// noteOnly hands over a run whose record cannot be trusted: the note alone, the record untouched.
func (r *Runner) noteOnly(ctx context.Context, runID string, cause error) {
	n := handover.Untrusted(r.cfg.Space, runID, r.cfg.StepName, cause, r.stamp())
	if noted, _ := handover.Noted(ctx, r.cfg.Handovers, runID, n.ID); noted {
		return
	}
	if err := handover.Put(ctx, r.cfg.Handovers, n); err != nil {
		r.log.Error("writing handover note", slog.Any("error", err))
		return
	}
	_ = r.audit.Record(ctx, events.AuditStepID(runID, r.cfg.StepName, "handover", 0), events.Audit{RunID: runID, Step: r.cfg.StepName, Event: "handover", Detail: cause.Error()})
	r.notify(ctx, "handover", n, 0, 0)
}

func (r *Runner) notify(ctx context.Context, kind string, note HandoverNote, generation int, token uint64) {
	if r.cfg.Notify != nil {
		r.cfg.Notify(ctx, kind, note, generation, token)
	}
}

// auditStep records an event about the attempt's step in its batch.
func (r *Runner) auditStep(a *Attempt, event string, rev uint64, detail string) {
	a.batch.Record(r.stepAudit(a, event, rev, detail))
}

// stepAudit is an audit event about the attempt's step, with its id.
func (r *Runner) stepAudit(a *Attempt, event string, rev uint64, detail string) (string, events.Audit) {
	return events.AuditStepID(a.RunID, a.Step, event, rev), events.Audit{
		RunID: a.RunID, Step: a.Step, Event: event, Token: a.Token.Value, Owner: r.owner.Name, Detail: cut(detail, 512),
	}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
