package supervisor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/tracing"
)

func (s *Supervisor) apply(ctx context.Context, ev events.Event) error {
	switch ev.Type {
	case events.TypeRunStart:
		return s.start(ctx, ev)
	case events.TypeRunCancel:
		return s.cancel(ctx, ev)
	case events.TypeRunResume:
		return s.resume(ctx, ev)
	case events.TypeRunRerun:
		return s.rerun(ctx, ev)
	case events.TypeRunApprove:
		return s.approve(ctx, ev)
	case events.TypeRunReject:
		return s.rejectRun(ctx, ev)
	default:
		return reject("command %s is not supported by this version of Cairn", ev.Type)
	}
}

// start validates a start, claims its input (its natural key) for its run id, creates the
// record with Create (the same start twice makes one run) and publishes the first step's
// event. A start of an input that another run id holds is refused, naming that run.
func (s *Supervisor) start(ctx context.Context, ev events.Event) error {
	var c events.StartCommand
	if err := ev.Unmarshal(&c); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if check := s.cfg.Pipeline.CheckInput; check != nil {
		if err := check(c.Params); err != nil {
			return fmt.Errorf("%w: start: %w", events.ErrInvalid, err)
		}
	}
	runID := c.RunID
	if runID == "" {
		runID = s.cfg.Pipeline.DefaultRunID(c.Params)
	}
	if err := events.ValidID("run_id", runID); err != nil {
		return err
	}
	ev.Subject = runID
	ctx, span := tracing.Start(ctx, ev, "run start")
	defer span.End()
	params := kc.Params{Input: c.Params, Shadow: c.Shadow}
	if rec, rev, err := s.cfg.Store.Load(ctx, runID); !errors.Is(err, kc.ErrNotFound) {
		if err != nil {
			return err
		}
		return s.startAgain(ctx, rec, rev, params)
	}
	// The input is claimed before the record exists, so no second run id ever does it too.
	holder, claimed, err := s.claimInput(ctx, runID, params)
	if err != nil {
		return err
	}
	if holder != runID {
		return &rejection{runID: runID, reason: fmt.Sprintf("run %s has this input already (%s): another run id would do its work twice; cairn rerun %s --from STEP runs it again",
			holder, describeInput(s.cfg.Pipeline, params), s.cfg.Space.RunArg(holder))}
	}
	rec := kc.New(runID, params, s.cfg.Pipeline.Names(), s.stamp())
	rec.After = s.cfg.Pipeline.Graph()
	rec.AddRequest(ev.ID)
	rec.NextAction = fmt.Sprintf("run step %s of %s", strings.Join(rec.Ready(), ", "), runID)
	rev, err := s.cfg.Store.Create(ctx, rec)
	if errors.Is(err, kc.ErrExists) { // made in between by a start of the same run id
		if rec, rev, err = s.cfg.Store.Load(ctx, runID); err != nil {
			return err
		}
		err = s.startAgain(ctx, rec, rev, params)
		var rej *rejection
		if errors.As(err, &rej) { // with other input: this claim is not its
			if rerr := s.releaseInput(ctx, params, claimed); rerr != nil {
				return rerr
			}
		}
		return err
	}
	if err != nil {
		return err
	}
	s.record(ctx, events.AuditStepID(runID, "run", "started", rev), events.Audit{RunID: runID, Event: "run.started", Detail: "started by " + ev.Source})
	if err := s.hit(ctx); err != nil {
		return err
	}
	return s.publishReady(ctx, rec, rev)
}

// startAgain: another start of an existing run. Other parameters are refused; a run whose
// first step is still pending with no lease gets its event again.
func (s *Supervisor) startAgain(ctx context.Context, rec *kc.Record, rev uint64, params kc.Params) error {
	runID := rec.RunID
	if !rec.Params.Equal(params) {
		have, _ := json.Marshal(rec.Params)
		want, _ := json.Marshal(params)
		return &rejection{runID: runID, reason: fmt.Sprintf("run %s exists with other parameters (%s, not %s)", runID, have, want)}
	}
	first := rec.Pipeline[0]
	if rec.Status != kc.Running || rec.Lease != nil || rec.Step(first).Status != kc.Pending {
		return nil
	}
	dup, err := stepevent.PublishAck(ctx, s.cfg.JS, s.cfg.Space, source, runID, first, rec.Generation, rev, s.cfg.Now())
	if err != nil || !dup {
		return err
	}
	// Dropped as a duplicate: fine while the first event still waits; if it was consumed,
	// publish again under a revision of its own.
	if stored, err := stepevent.Stored(ctx, s.cfg.JS, s.cfg.Space, runID, first); err != nil || stored {
		return err
	}
	return s.republish(ctx, runID, first, rev)
}

func (s *Supervisor) command(ev events.Event) (events.Command, error) {
	var c events.Command
	if err := ev.Unmarshal(&c); err != nil {
		return c, err
	}
	if ev.Subject == "" {
		return c, reject("command %s names no run", ev.Type)
	}
	return c, nil
}

// cancel stops a run at the next step boundary: the holder of a live lease commits what it
// finished and publishes nothing.
func (s *Supervisor) cancel(ctx context.Context, ev events.Event) error {
	if _, err := s.command(ev); err != nil {
		return err
	}
	_, rev, err := s.mutate(ctx, ev, func(r *kc.Record) error {
		if r.HasRequest(ev.ID) {
			return kc.ErrSkip
		}
		switch r.Status {
		case kc.Running, kc.WaitingApproval, kc.HandedOver:
		default:
			return kc.ErrSkip // nothing to cancel
		}
		r.AddRequest(ev.ID)
		r.Status = kc.Cancelled
		r.NextAction = fmt.Sprintf("cancelled: cairn resume %[1]s to go on, or cairn undo %[1]s", r.RunID)
		return nil
	})
	if errors.Is(err, kc.ErrNotFound) {
		return reject("cancel: run %s does not exist", ev.Subject)
	}
	if err != nil && !errors.Is(err, kc.ErrSkip) {
		return err
	}
	if err == nil {
		s.record(ctx, events.AuditStepID(ev.Subject, "run", "cancelled", rev), events.Audit{RunID: ev.Subject, Event: "run.cancelled"})
		return s.hit(ctx)
	}
	return nil
}

// resume sets a handed-over or cancelled run running again from the step that stopped.
// --after-fix says a person fixed the cause: the run's generation goes up and it runs again
// from fetch when its source changed (the new fingerprint is then accepted), otherwise from
// the step that stopped; the writing steps reverse what no longer stands (DESIGN.md, "Reruns
// and corrections").
func (s *Supervisor) resume(ctx context.Context, ev events.Event) error {
	c, err := s.command(ev)
	if err != nil {
		return err
	}
	if err := s.requeueOnResume(ctx, ev.ID, ev.Subject); err != nil {
		return err
	}
	var step string
	var waits, dropped bool
	rec, rev, err := s.mutate(ctx, ev, func(r *kc.Record) error {
		waits, dropped = false, false
		if r.HasRequest(ev.ID) || (r.Status != kc.HandedOver && r.Status != kc.Cancelled) {
			if dropped = r.DropCommand(ev.ID); dropped {
				return nil // it waited, and no longer applies: its wait ends
			}
			return kc.ErrSkip
		}
		if l := r.Lease; l != nil {
			// A cancelled run's holder releases its lease at its next commit (or the sweep
			// releases it when it expires); until then the resume waits in the record.
			added, err := commandWaits(r, Waiting(events.VerbResume, ev, c, s.stamp()))
			if err != nil || !added {
				return cmp.Or(err, kc.ErrSkip)
			}
			waits = true
			r.NextAction = fmt.Sprintf("resume of %s waits for step %s to release its lease", r.RunID, l.Step)
			return nil
		}
		r.AddRequest(ev.ID)
		r.Status = kc.Running
		r.Handover = nil
		r.Progress = nil // a person decided: the loop guard counts afresh
		step = stoppedAt(r)
		if c.AfterFix && step != "" {
			step = rerunFrom(r, step)
			r.NextAction = fmt.Sprintf("run step %s of %s again, generation %d (resumed after a fix)", step, r.RunID, r.Generation)
			return nil
		}
		if step == "" {
			r.Status = kc.Finishing
			return nil
		}
		for _, ready := range r.Ready() { // the step that stopped, and any beside it that failed
			if st := r.Step(ready); st.Status == kc.Failed {
				st.Status = kc.Pending
				st.Attempts = 0
			}
		}
		r.NextAction = fmt.Sprintf("run step %s of %s", strings.Join(r.Ready(), ", "), r.RunID)
		return nil
	})
	if errors.Is(err, kc.ErrNotFound) {
		return reject("resume: run %s does not exist", ev.Subject)
	}
	if errors.Is(err, kc.ErrSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	if waits || dropped {
		s.waited(ctx, ev, waits, rev)
		return s.hit(ctx)
	}
	a := events.Audit{RunID: ev.Subject, Event: "run.resumed", Step: step}
	if c.AfterFix {
		a.Detail = fmt.Sprintf("after a fix: generation %d from step %s", rec.Generation, step)
	}
	s.record(ctx, events.AuditStepID(ev.Subject, "run", "resumed", rev), a)
	if err := s.hit(ctx); err != nil {
		return err
	}
	if step == "" {
		return nil
	}
	return s.publishReady(ctx, rec, rev)
}

// waited audits a command that now waits in the record (waits), or whose wait ended
// because it no longer applies.
func (s *Supervisor) waited(ctx context.Context, ev events.Event, waits bool, rev uint64) {
	verb := strings.TrimPrefix(ev.Type, "io.cairn.run.")
	verb = strings.TrimSuffix(verb, ".v1")
	event, detail := "command.waiting", verb+" "+ev.ID+" waits for the run's lease"
	if !waits {
		event, detail = "command.dropped", verb+" "+ev.ID+" no longer applies"
	}
	s.record(ctx, events.AuditStepID(ev.Subject, "run", event, rev), events.Audit{RunID: ev.Subject, Event: event, Detail: detail})
}

// rerunFrom starts generation+1 of a run from the step that stopped, or from its first step
// when the stop was a changed source (whose new fingerprint the rerun accepts).
// stoppedAt is the step a handed-over or cancelled run stopped at: the first that failed,
// or else the first not verified ("" when none is left).
func stoppedAt(r *kc.Record) string {
	for _, name := range r.Pipeline {
		if r.Step(name).Status == kc.Failed {
			return name
		}
	}
	return r.Current()
}

func rerunFrom(r *kc.Record, stopped string) string {
	from, drift := stopped, ""
	if st := r.Step(stopped); st.LastError != nil && strings.Contains(*st.LastError, runner.ErrSourceChanged.Error()) {
		from, drift = r.Pipeline[0], *st.LastError
	}
	resetFrom(r, from)
	if drift != "" {
		// The evidence a later step that cannot be undone waits on (runner.DriftAccepted).
		r.Step(from).SetLastError(kc.CutText(runner.DriftAccepted+" (after a fix): "+drift, kc.MaxKeptError))
	}
	return from
}

// resetFrom raises the run's generation and makes step and every step after it (each that
// waits for it, directly or through others) pending again;
// the outputs of earlier generations stay in the artifact store, their effects in the
// outside systems (the rerun's writing steps reverse what no longer stands).
func resetFrom(r *kc.Record, step string) {
	if step == r.Pipeline[0] {
		r.SourceFingerprint = nil // the first step records the source anew
	}
	r.Generation++
	r.Approval = nil
	r.Handover = nil
	r.Lease = nil
	r.Status = kc.Running
	r.Steps[step] = kc.NewStep()
	for _, name := range r.Descendants(step) {
		r.Steps[name] = kc.NewStep()
	}
	r.NextAction = fmt.Sprintf("run step %s of %s again, generation %d", step, r.RunID, r.Generation)
}

// rerun starts a finished, handed-over or cancelled run again from a step (cairn rerun RUN
// --from STEP), after new code or corrected data: the earlier steps' verified outputs are
// kept, and the keys make the repeated writes harmless.
func (s *Supervisor) rerun(ctx context.Context, ev events.Event) error {
	c, err := s.command(ev)
	if err != nil {
		return err
	}
	if c.From == "" {
		return reject("rerun of %s: name the step to run again from (cairn rerun RUN --from STEP)", ev.Subject)
	}
	if _, ok := s.cfg.Pipeline.Step(c.From); !ok {
		return reject("rerun of %s: no step %q in pipeline %s (%v)", ev.Subject, c.From, s.cfg.Pipeline.Name, s.cfg.Pipeline.Names())
	}
	var waits, dropped bool
	rec, rev, err := s.mutate(ctx, ev, func(r *kc.Record) error {
		waits, dropped = false, false
		if r.HasRequest(ev.ID) {
			return kc.ErrSkip
		}
		switch r.Status {
		case kc.Done, kc.HandedOver, kc.Cancelled:
		default:
			if dropped = r.DropCommand(ev.ID); dropped {
				return nil
			}
			return reject("rerun of %s: the run is %s; only a done, handed-over or cancelled run can be run again", r.RunID, r.Status)
		}
		if l := r.Lease; l != nil {
			added, err := commandWaits(r, Waiting(events.VerbRerun, ev, c, s.stamp()))
			if err != nil || !added {
				return cmp.Or(err, kc.ErrSkip)
			}
			waits = true
			r.NextAction = fmt.Sprintf("rerun of %s waits for step %s to release its lease", r.RunID, l.Step)
			return nil
		}
		r.AddRequest(ev.ID)
		resetFrom(r, c.From)
		r.NextAction += " (rerun requested)"
		return nil
	})
	if errors.Is(err, kc.ErrNotFound) {
		return reject("rerun: run %s does not exist", ev.Subject)
	}
	if errors.Is(err, kc.ErrSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	if waits || dropped {
		s.waited(ctx, ev, waits, rev)
		return s.hit(ctx)
	}
	s.record(ctx, events.AuditStepID(ev.Subject, "run", "rerun", rev), events.Audit{RunID: ev.Subject, Event: "run.rerun", Step: c.From,
		Detail: fmt.Sprintf("rerun from %s as generation %d", c.From, rec.Generation)})
	if err := s.hit(ctx); err != nil {
		return err
	}
	return s.publishReady(ctx, rec, rev)
}

// approve lets a run that waits on a plan go on: approval.by and .at are set and the run is
// running again, then the step's event is published. An approval of a step approved but
// not yet verified publishes the event again (a crash between the two is healed by
// approving again); anything else changes nothing, and is audited.
func (s *Supervisor) approve(ctx context.Context, ev events.Event) error {
	c, err := s.command(ev)
	if err != nil {
		return err
	}
	by := cmp.Or(c.By, kc.CutText(ev.Source, events.MaxName)) // by is at most MaxName bytes (decoding)
	var again bool
	rec, rev, err := s.mutate(ctx, ev, func(r *kc.Record) error {
		ap := r.Approval
		switch {
		case r.Status == kc.WaitingApproval && ap != nil && ap.By == nil:
			var err error
			var sig *string
			if by, sig, err = s.approver(ctx, ev.Subject, ap.PlanDigest, c, by); err != nil {
				return err
			}
			at := s.stamp()
			ap.By, ap.At, ap.Sig = &by, &at, sig
			r.Status = kc.Running
			r.AddRequest(ev.ID)
			r.NextAction = fmt.Sprintf("send the approved plan of %s (%s)", ap.Step, ap.PlanDigest)
			return nil
		case r.Status == kc.Running && ap != nil && ap.By != nil && r.Step(ap.Step).Status != kc.Verified && r.Lease == nil:
			again = true
			r.AddRequest(ev.ID)
			return nil
		}
		return kc.ErrSkip
	})
	if errors.Is(err, kc.ErrNotFound) {
		return reject("approve: run %s does not exist", ev.Subject)
	}
	if errors.Is(err, kc.ErrSkip) {
		detail := fmt.Sprintf("nothing to approve: the run is %s", rec.Status)
		s.record(ctx, events.AuditStepID(ev.Subject, "run", "approve.ignored", rev), events.Audit{RunID: ev.Subject, Event: "approve.ignored", Detail: detail})
		return nil
	}
	if err != nil {
		return err
	}
	step := rec.Approval.Step
	event := "approved"
	if again {
		event = "approved.again"
	}
	s.record(ctx, events.AuditStepID(ev.Subject, step, event, rev), events.Audit{RunID: ev.Subject, Step: step, Event: event, Detail: "by " + by + ", plan " + rec.Approval.PlanDigest})
	if err := s.hit(ctx); err != nil {
		return err
	}
	return s.publish(ctx, ev.Subject, step, rec.Generation, rev)
}

// rejectRun refuses a waiting plan: the run is cancelled and undone (the compensator takes
// it from there).
func (s *Supervisor) rejectRun(ctx context.Context, ev events.Event) error {
	c, err := s.command(ev)
	if err != nil {
		return err
	}
	rec, rev, err := s.mutate(ctx, ev, func(r *kc.Record) error {
		if r.HasRequest(ev.ID) {
			return kc.ErrSkip
		}
		if r.Status != kc.WaitingApproval {
			return reject("reject of %s: the run is %s, not waiting for approval", r.RunID, r.Status)
		}
		r.AddRequest(ev.ID)
		r.Status = kc.Cancelled
		r.NextAction = "rejected: undoing the run"
		return nil
	})
	if errors.Is(err, kc.ErrNotFound) {
		return reject("reject: run %s does not exist", ev.Subject)
	}
	if err != nil && !errors.Is(err, kc.ErrSkip) {
		return err
	}
	if err == nil {
		s.record(ctx, events.AuditStepID(ev.Subject, "run", "rejected", rev), events.Audit{RunID: ev.Subject, Event: "run.rejected", Detail: "plan " + rec.Approval.PlanDigest})
	}
	// The undo, under the reject's own request id, so a replayed reject asks once.
	// Made from the id as the record keeps it (kc.RequestKey), so it is within MaxRequestID.
	u := events.Command{RequestID: kc.RequestKey(cmp.Or(c.RequestID, ev.ID)) + ":undo"}
	e, err := events.New(u.RequestID, events.TypeRunUndo, source, ev.Subject, s.cfg.Now(), u)
	if err != nil {
		return err
	}
	m, err := events.Encode(s.cfg.Space.Run(ev.Subject, events.VerbUndo), e)
	if err != nil {
		return err
	}
	if _, err := s.cfg.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("asking for the undo of %s: %w", ev.Subject, err)
	}
	return nil
}
