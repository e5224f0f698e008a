package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
)

// attempt runs points 2 to 10 of the step protocol and says how to settle the message.
// scheduled is the revision whose write scheduled the event (0 if unknown).
func (r *Runner) attempt(ctx context.Context, m jetstream.Msg, ready events.StepReady, redelivered bool, scheduled uint64) settleFunc {
	run, step := ready.RunID, r.cfg.StepName
	// 2. Load and check sum and epoch. A record this process wrote at the revision that
	// scheduled the event is not read back: every write below is a compare-and-set on
	// its revision, so a newer record refuses it and is read then.
	rec, rev, remembered, size, err := r.cfg.Store.LoadAt(ctx, run, scheduled)
	switch {
	case errors.Is(err, kc.ErrNotFound):
		return func(m jetstream.Msg) {
			r.log.Warn("step event for a run without a checkpoint", slog.String("run_id", run))
			_ = m.TermWithReason("no checkpoint for run " + run)
		}
	case errors.Is(err, kc.ErrCorrupt), errors.Is(err, kc.ErrForeignEpoch):
		r.noteOnly(ctx, run, err)
		return ack
	case errors.Is(err, kc.ErrNewerSchema):
		// A newer release wrote the run (a rolling upgrade): one of its workers takes the event.
		r.log.Warn("step event left to a newer release", slog.String("run_id", run), slog.Any("error", err))
		return nakAfter(kc.NewerSchemaRetry)
	case err != nil:
		r.log.Warn("loading checkpoint", slog.String("run_id", run), slog.Any("error", err))
		return nakAfter(time.Second)
	}
	// 3. May the step run?
	if ready.Generation != rec.Generation || rec.Index(step) < 0 {
		return ack
	}
	if rec.Step(step).Status == kc.Verified {
		auth, arev, err := r.cfg.Store.LoadAuthoritative(ctx, run)
		if err != nil {
			return nakAfter(time.Second)
		}
		if auth.Step(step).Status == kc.Verified {
			r.publishNextIfIdle(ctx, auth, arev)
			return ack
		}
		rec, rev, size = auth, arev, 0
	}
	if rec.Status != kc.Running || !rec.EarlierVerified(step) {
		return ack
	}
	if !r.def.Leased {
		return r.runLeaseFree(ctx, m, ready, rec, rev, size, redelivered)
	}
	if rec.Lease != nil {
		r.takeOver(ctx, run, *rec.Lease)
		return ack
	}
	// 4. Take the lease.
	restart := rec.Step(step).Status == kc.InProgress
	startedAt := r.stamp()
	versions := r.versions()
	// An earlier attempt of the step (one that died, failed and is retried, or was handed
	// over and resumed) recorded its versions when it took the lease: another build, prompt
	// or model since is recorded as a version change.
	change := versionChange(rec.Step(step).Versions, versions)
	prepare := func(n *kc.Record) {
		s := n.Step(step)
		if restart {
			n.Restarts++
			s.Attempts++
			msg := "the previous attempt's owner died or was taken over"
			if change != "" {
				msg += "; " + versionChangeNote + change
			}
			s.SetLastError(msg)
		} else if change != "" {
			msg := versionChangeNote + change
			if s.LastError != nil {
				msg += "; before: " + *s.LastError
			}
			s.SetLastError(msg)
		}
		s.Status = kc.InProgress
		s.StartedAt = &startedAt
		s.Versions = versions
	}
	// Before anything the step does: the record must have room for its commit and a failure.
	if !r.roomFor(rec, rev, step, prepare) {
		return r.noRoom(ctx, rec)
	}
	h, err := r.cfg.Store.Take(ctx, rec, rev, r.owner, step, prepare)
	if errors.Is(err, kc.ErrTooLarge) {
		return r.noRoom(ctx, rec)
	}
	if errors.Is(err, kc.ErrConflict) {
		if remembered { // the record had moved on since this process wrote it: read it
			return r.attempt(ctx, m, ready, redelivered, 0)
		}
		return nakAfter(100 * time.Millisecond)
	}
	if err != nil {
		r.log.Warn("taking lease", slog.String("run_id", run), slog.Any("error", err))
		return nakAfter(time.Second)
	}
	a := r.newAttempt(rec, h.Token(), restart)
	a.drift.continued = continues(ready, rev, restart)
	r.auditStep(a, "step.started", h.Token(), "")
	if change != "" {
		r.auditStep(a, "version.changed", h.Token(), change)
		a.log.Warn("the step restarts under other versions", slog.String("change", change))
	}
	return r.hold(ctx, m, a, h)
}

// takeOver is the fast takeover of a lease found on the step: released when its owner is
// proven gone. A lease with a foreign owner inbox is left to the supervisor, which hands the
// run over naming it; this worker asks nothing.
func (r *Runner) takeOver(ctx context.Context, runID string, l kc.Lease) {
	if err := lease.CheckInbox(r.cfg.Space, l); err != nil {
		r.log.Warn("lease left to the supervisor", slog.String("run_id", runID), slog.Any("error", err))
		return
	}
	released, err := r.takeover.ReleaseGone(ctx, runID, l)
	if err != nil {
		r.log.Warn("releasing a dead owner's lease", slog.String("run_id", runID), slog.Any("error", err))
	}
	if released {
		r.m.Reassignments.WithLabelValues(l.Step, "owner_gone").Inc()
		r.log.Info("released a dead owner's lease", slog.String("run_id", runID), slog.String("dead_owner", l.Owner), slog.Uint64("token", l.Token))
	}
}

func (r *Runner) newAttempt(rec *kc.Record, token uint64, restart bool) *Attempt {
	if restart {
		r.m.Restarts.WithLabelValues(r.cfg.StepName).Inc()
	}
	r.hot.started.Inc()
	return &Attempt{
		RunID: rec.RunID, Step: r.cfg.StepName, Params: rec.Params, Generation: rec.Generation,
		Token:   fence.Token{RunID: rec.RunID, Epoch: r.cfg.Store.Epoch(), Value: token},
		Restart: restart, rec: rec, r: r, batch: r.audit.Batch(), began: r.cfg.Now(),
		log: r.log.With(slog.String("run_id", rec.RunID), slog.Uint64("token", token)),
	}
}

// hold runs a leased attempt from the drift check and the loop guard to the commit.
func (r *Runner) hold(ctx context.Context, m jetstream.Msg, a *Attempt, h *kc.Holder) settleFunc {
	cur, _ := h.Record()
	if err := r.checkDrift(ctx, a, cur); err != nil {
		return r.fail(ctx, a, h, err)
	}
	// The restart's loop guard reads the step's outside systems and the fences write
	// them: either may wait for a system that is slow or down for a while (an HTTP API
	// restarted), so the heartbeat keeps the lease and the message meanwhile, as in Run.
	err := r.beating(ctx, m, a, h, func(ctx context.Context) error {
		if a.Restart {
			if err := r.guardRestart(ctx, a, h); err != nil {
				return err
			}
		}
		// 5. Fences first.
		if f := r.hooks.fencer; f != nil && r.def.Fenced {
			if err := f.RaiseFences(ctx, a, a.Token); err != nil {
				return fmt.Errorf("raising fences: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return r.fail(ctx, a, h, err)
	}
	// A step that cannot be undone waits for a person while the run's evidence is unclear,
	// as a step configured to wait for approval always does.
	var unclear string
	if r.def.Irreversible {
		cur, _ := h.Record()
		unclear = unclearEvidence(cur, a.Step)
	}
	if r.cfg.Approval || unclear != "" {
		if settle, wait := r.approvalGate(ctx, a, h, unclear); wait {
			return settle
		}
	}
	// 6-8. Run with a heartbeat, store the outputs, verify them as stored.
	res, outs, err := r.runWithHeartbeat(ctx, m, a, h)
	if err != nil {
		return r.fail(ctx, a, h, err)
	}
	if over := r.overParkLimit(res); over != "" {
		return r.handover(ctx, a, h, errors.New(over))
	}
	// 9. Outputs inline only within the record's budget, then commit.
	cur, _ = h.Record()
	if outs, err = r.fitOutputs(ctx, a, cur, res, outs); err != nil {
		return r.fail(ctx, a, h, err)
	}
	if err := a.Fault(ctx, faults.BeforeCommit, 0); err != nil {
		return r.fail(ctx, a, h, err)
	}
	if err := h.Release(ctx, func(n *kc.Record) error { r.applyCommit(n, a, res, outs); return nil }); err != nil {
		return r.fail(ctx, a, h, err)
	}
	committed, crev := h.Record()
	return r.afterCommit(ctx, a, committed, crev)
}

// afterCommit is point 10: publish the step's step.verified audit event and the next step's
// event, wait for the attempt's other audit events, ack. Those two publishes are not waited
// for (watchAcks logs a failure): the commit is in the record, from which the supervisor
// publishes a lost step event again; a lost step.verified costs a timeline line. Events
// that count something (Attempt.Audit, AuditNow) are stored before the ack.
//
// A quiet commit (recordsItsCommit) publishes no step.verified: the record is its line.
func (r *Runner) afterCommit(ctx context.Context, a *Attempt, committed *kc.Record, crev uint64) settleFunc {
	if err := a.Fault(ctx, faults.AfterCommit, 0); err != nil {
		a.log.Warn("fault after commit", slog.Any("error", err))
	}
	var late []jetstream.PubAckFuture
	if !r.recordsItsCommit(committed.Step(a.Step)) {
		if f, err := r.audit.Post(r.stepAudit(a, "step.verified", crev, "")); err != nil {
			a.log.Warn("audit event not published", slog.Any("error", err))
		} else {
			late = append(late, f)
		}
	}
	if committed.Status == kc.Running {
		// The steps this commit lets run: the next one, or each waiting for this step
		// and nothing else left (a join is published by the commit of the last it waits
		// for: the commits are compare-and-sets, so one of them sees all the others).
		if nexts := committed.Unblocked(a.Step); len(nexts) > 0 {
			vouched := r.vouches(a, committed, crev)
			if err := a.Fault(ctx, faults.BeforeNextPublish, 0); err != nil {
				a.log.Warn("fault before next publish", slog.Any("error", err))
			}
			for _, next := range nexts {
				if f, err := r.publishStepAsync(ctx, committed.RunID, next, committed.Generation, crev, vouched); err != nil {
					a.log.Warn("publishing the next step; the supervisor will move the run on", slog.String("next", next), slog.Any("error", err))
				} else {
					late = append(late, f)
				}
			}
		}
	}
	r.watchAcks(a.log, late)
	if err := a.batch.Wait(ctx); err != nil {
		a.log.Warn("audit events not stored", slog.Any("error", err))
	}
	r.hot.verified.Inc()
	r.hot.parked.Add(float64(committed.Step(a.Step).ParkedCount))
	r.observe(a, "verified")
	if committed.Status == kc.Finishing {
		r.m.RunRestarts.Observe(float64(committed.Restarts))
	}
	a.log.Info("step verified", slog.Int("parked", committed.Step(a.Step).ParkedCount))
	if committed.Status == kc.Finishing && r.cfg.Finishing != nil {
		r.cfg.Finishing(ctx, committed.RunID)
	}
	return ack
}

// recordsItsCommit says whether a commit's record alone is its timeline line: the commit of
// a lease-free step that counted no outside effect. Its verified step (finished_at, token)
// says all its step.verified would (cairn timeline reads it from the record), so such a
// transition pays one synced write, the checkpoint's, and not a second for CAIRN_AUDIT. A
// leased step, or one that changed something outside, keeps its event beside its start
// and its effects on the timeline.
func (r *Runner) recordsItsCommit(s *kc.Step) bool {
	return !r.def.Leased && s.Effects == nil && s.Token != nil && s.FinishedAt != nil
}

func (r *Runner) stamp() string { return r.cfg.Now().UTC().Format(time.RFC3339Nano) }

// outputs are the pointers a commit writes, how many parked items the record lists, and
// what the commit says of the step's inputs and open intents.
type outputs struct {
	output, snapshot, parked *kc.Output
	listed                   int
	fingerprint              string
	open                     int
	counted                  bool   // open is a count (see countIntents)
	anomaly                  string // what the step's Verify found (Anomaly), "" when nothing
}

func (r *Runner) saveOutputs(ctx context.Context, a *Attempt, res *Result) (outputs, error) {
	var o outputs
	var err error
	out := res.Output
	if len(out) == 0 {
		out = []byte("{}")
	}
	if o.output, err = r.cfg.Artifacts.Save(ctx, a.RunID, a.Step, out); err != nil {
		return o, Temporary(err)
	}
	if len(res.Snapshot) > 0 {
		if o.snapshot, err = r.cfg.Artifacts.Save(ctx, a.RunID, a.Step, res.Snapshot); err != nil {
			return o, Temporary(err)
		}
	}
	o.listed = min(len(res.Parked), kc.MaxParkedListed)
	if len(res.Parked) > kc.MaxParkedListed || slices.ContainsFunc(res.Parked, longParked) {
		b, merr := jsonMarshal(res.Parked)
		if merr != nil {
			return o, merr
		}
		if o.parked, err = r.cfg.Artifacts.Save(ctx, a.RunID, a.Step, b); err != nil {
			return o, Temporary(err)
		}
	}
	o.fingerprint = a.inputFingerprint(res.InputFingerprint)
	o.open, o.counted = r.countIntents(ctx, a)
	return o, nil
}

func (r *Runner) applyCommit(n *kc.Record, a *Attempt, res *Result, o outputs) {
	s := n.Step(a.Step)
	finished := r.stamp()
	token := a.Token.Value
	s.Status = kc.Verified
	s.Output = o.output
	s.Token = &token
	s.FinishedAt = &finished
	if s.StartedAt == nil { // a lease-free step's: its attempt began with no write
		began := a.began.UTC().Format(time.RFC3339Nano)
		s.StartedAt = &began
	}
	s.Versions = r.versions()
	if res.Versions != (kc.Versions{}) {
		s.Versions = res.Versions
		code := r.cfg.CodeVersion
		s.Versions.Code = &code
	}
	s.Effects = res.Effects
	s.SetIntentsOpen(o.open, o.counted)
	if n.Progress != nil && n.Progress.Step == a.Step { // the loop guard's count ends with its step
		n.Progress = nil
	}
	if s.LastError != nil { // an earlier failure's note, kept short now that the step is done
		s.LastError = kc.Ptr(kc.CutText(*s.LastError, kc.MaxKeptError))
	}
	if o.anomaly != "" { // the evidence a later step that cannot be undone waits on
		s.SetLastError(kc.CutText(anomalyNote+o.anomaly, kc.MaxKeptError))
	}
	if o.fingerprint != "" {
		s.InputFingerprint = &o.fingerprint
	}
	// The record lists the first parked items, briefly, as many as its budget allows
	// (fitOutputs); the whole list, reasons in full, is in parked_artifact when there are more.
	s.Parked = make([]kc.Parked, 0, o.listed)
	for _, p := range res.Parked[:o.listed] {
		s.Parked = append(s.Parked, kc.Parked{Item: cut(p.Item, 64), Reason: cut(p.Reason, 48)})
	}
	s.ParkedCount = len(res.Parked)
	s.ParkedArtifact = o.parked
	if res.SourceFingerprint != "" {
		n.SourceFingerprint = &res.SourceFingerprint
	}
	if o.snapshot != nil {
		n.Snapshot = o.snapshot
	}
	next := n.Next(a.Step)
	switch {
	case n.Status == kc.Running && next == "":
		n.Status = kc.Finishing
		n.NextAction = "deliver the run's mail, then mark it done"
	case res.NextAction != "":
		n.NextAction = kc.CutText(res.NextAction, kc.MaxNextAction)
	case next != "":
		if ready := n.Ready(); len(ready) > 1 {
			n.NextAction = kc.CutText(fmt.Sprintf("run steps %s of %s", strings.Join(ready, ", "), n.RunID), kc.MaxNextAction)
		} else {
			n.NextAction = fmt.Sprintf("run step %s of %s", next, n.RunID)
		}
	}
}

func (r *Runner) overParkLimit(res *Result) string {
	if len(res.Parked) == 0 || res.Items == 0 {
		return ""
	}
	if float64(len(res.Parked)) > r.cfg.ParkLimit*float64(res.Items) {
		return fmt.Sprintf("%d of %d items parked, over the park limit of %.0f%%", len(res.Parked), res.Items, r.cfg.ParkLimit*100)
	}
	return ""
}

// versions are the versions this runner's step runs under: the code's, and the step's own.
func (r *Runner) versions() kc.Versions {
	var v kc.Versions
	if vs := r.hooks.versioner; vs != nil {
		v = vs.Versions()
	}
	code := r.cfg.CodeVersion
	v.Code = &code
	return v
}

// versionChange names what differs between the versions an earlier attempt ran under and
// now, "" when nothing does (or the earlier attempt recorded none).
func versionChange(before, now kc.Versions) string {
	var diffs []string
	for _, f := range []struct {
		name     string
		old, new *string
	}{{"code", before.Code, now.Code}, {"prompt", before.Prompt, now.Prompt}, {"schema", before.Schema, now.Schema}, {"model", before.Model, now.Model}} {
		if f.old == nil || f.new == nil || *f.old == *f.new {
			continue
		}
		diffs = append(diffs, fmt.Sprintf("%s %s → %s", f.name, *f.old, *f.new))
	}
	return strings.Join(diffs, ", ")
}
