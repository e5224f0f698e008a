package undo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/intents"
	"github.com/cairnhq/cairn/internal/retrypolicy"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/consume"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// Step is the lease step of an undo.
const Step = kc.UndoLease

// source is the compensator's events' source.
const source = "/cairn/compensator"

// System is an outside system whose effects an undo reverses, registered under the system
// name its effects carry (saga.Reverse.System).
type System interface {
	// RaiseFence raises the system's fence to the undo's token t before the undo's first
	// reversal, so that a step's writer of an older token is refused from now on (a no-op
	// for a system without fences). rec is the run's record (its params: a shadow run's
	// tables). It is called at each start or resumption of an undo.
	RaiseFence(ctx context.Context, t fence.Token, rec *kc.Record) error
	// Reverse reverses effect e of run rec (its intent: e.Intent.Key, e.Intent.Reverse's
	// system, key and payload) by a write fenced by t; made says whether it wrote a new
	// reversal (false: reversed already, or nothing to reverse: the intent's write never
	// landed). It must be safe to repeat: the undo repeats a reversal whose answer it lost.
	// An error runner.IsTemporary takes for temporary is tried again in place; one marked
	// runner.Permanent (or idempotency.ErrConflict), a refusal no retry changes, hands the
	// run over naming the effect; any other stops the undo, and its command comes back.
	Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (made bool, err error)
}

// Config is what the compensator needs.
type Config struct {
	JS    jetstream.JetStream
	Store *kc.Store // signing as the compensator (kvcheckpoint.DefaultRoles.Compensator)
	// Space is the pipeline's: its runs stream and compensator durable, its saga, timeline
	// and rejections. The zero value is the reference night's.
	Space assets.Space
	// Systems reverse the effects, by the system name each carries (saga.Reverse.System):
	// saga.Mail for the outbox's messages (Mail), the pipeline's own names for the rest.
	Systems     map[string]System
	Handovers   jetstream.KeyValue // cairn-handovers: the note of an undo handed over (may be nil: no note)
	Heartbeat   time.Duration      // default 5s
	TakeoverGap time.Duration      // default 500ms
	Faults      *faults.Set        // undo.before-write.N and the other points
	Now         func() time.Time
	Logger      *slog.Logger

	// RetryAttempts is the tries of one reversal that fails temporarily (a dropped database
	// connection, SQLITE_BUSY), with the runner's item retry waits; default 3.
	RetryAttempts int
}

// Compensator consumes undo commands.
type Compensator struct {
	cfg   Config
	owner kc.Owner
	// takeover releases an undo's lease whose owner is proven gone.
	takeover lease.Takeover
	audit    *audit.Publisher
	log      *slog.Logger
}

// New checks the configuration.
func New(c Config) (*Compensator, error) {
	c.Heartbeat = cmp.Or(c.Heartbeat, lease.DefaultHeartbeat)
	c.TakeoverGap = cmp.Or(c.TakeoverGap, lease.DefaultTakeoverGap)
	c.RetryAttempts = cmp.Or(c.RetryAttempts, 3)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.JS == nil || c.Store == nil {
		return nil, errors.New("compensator: needs JetStream and the checkpoint store")
	}
	// No Systems is a pipeline that writes nothing outside: its undo reverses nothing and
	// makes the run undone; an effect it did record still hands the run over, naming its
	// system.
	for _, name := range slices.Sorted(maps.Keys(c.Systems)) {
		if c.Systems[name] == nil {
			return nil, fmt.Errorf("compensator: system %q is nil in Systems", name)
		}
	}
	owner := lease.NewOwner(c.Space, "compensator")
	takeover := lease.Takeover{JS: c.JS, Space: c.Space, Store: c.Store, Source: source, Gap: c.TakeoverGap, Now: c.Now,
		Publish: func(ctx context.Context, runID, step string, generation int, rev uint64) error {
			return stepevent.Publish(ctx, c.JS, c.Space, source, runID, step, generation, rev, c.Now())
		}}
	return &Compensator{cfg: c, owner: owner, takeover: takeover, audit: audit.New(c.JS, "compensator", c.Now).In(c.Space),
		log: c.Logger.With(slog.String("service", "compensator"), slog.String("owner", owner.Name))}, nil
}

// Run consumes the compensator durable until ctx ends; it returns nil on a clean stop, and an
// error wrapping consume.ErrEnded when the loop ends by itself (the durable deleted, the
// connection closed).
func (c *Compensator) Run(ctx context.Context) error {
	stopAnswering, err := lease.Answer(c.cfg.JS.Conn(), c.owner)
	if err != nil {
		return err
	}
	defer stopAnswering()
	stream := c.cfg.Space.Stream(assets.StreamRuns)
	cons, err := c.cfg.JS.Consumer(ctx, stream, assets.ConsumerCompensator)
	if err != nil {
		return fmt.Errorf("looking up consumer %q of %s: %w", assets.ConsumerCompensator, stream, err)
	}
	return consume.Run(ctx, cons, func(m jetstream.Msg) { c.Handle(ctx, m) }, consume.Pull(jetstream.PullMaxMessages(1)),
		consume.Drain(), consume.StopWithin(10*time.Second), consume.Logger(c.log))
}

// errWait: the undo cannot start yet (a step still holds the lease); the command comes back.
var errWait = errors.New("waiting")

// Handle applies one undo command and settles its message.
func (c *Compensator) Handle(ctx context.Context, m jetstream.Msg) {
	meta, _ := m.Metadata()
	var seq uint64
	if meta != nil {
		seq = meta.Sequence.Stream
	}
	nm := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
	// A panic is a rejected undo, and a handover of the run's undo (handoverPanic);
	// consume.Recover terms it.
	var id string // the undo's request, once known
	defer consume.Recover(c.log, m, func(err error) { c.handoverPanic(ctx, m, nm, seq, id, err) })
	ev, err := events.DecodeCommand(c.cfg.Space, nm, fmt.Sprintf("seq-%d", seq))
	var cmd events.Command
	if err == nil {
		err = ev.Unmarshal(&cmd)
	}
	if err == nil {
		err = cmd.Validate()
	}
	if err == nil {
		ev.ID = kc.RequestKey(cmp.Or(cmd.RequestID, ev.ID))
		id = ev.ID
		err = c.undo(ctx, m, ev.Subject, ev.ID, cmd.Scope, supervisor.Waiting(events.VerbUndo, ev, cmd, c.cfg.Now().UTC().Format(time.RFC3339Nano)))
	}
	var rej *rejection
	switch {
	case err == nil:
		_ = m.Ack()
	case errors.Is(err, errWait):
		_ = m.NakWithDelay(500 * time.Millisecond)
	case errors.Is(err, kc.ErrNewerSchema):
		// A newer release wrote the run (a rolling upgrade): its compensator takes the command.
		c.log.Warn("undo left to a newer release", slog.String("run_id", ev.Subject), slog.Any("error", err))
		_ = m.NakWithDelay(kc.NewerSchemaRetry)
	case errors.As(err, &rej), errors.Is(err, events.ErrInvalid), errors.Is(err, events.ErrInvalidID):
		stream := c.cfg.Space.Stream(assets.StreamRuns)
		id := events.RejectedID(stream, seq)
		if rerr := c.audit.Reject(ctx, id, ev.Subject, events.NewRejected(stream, seq, nm, err.Error())); rerr != nil {
			_ = m.NakWithDelay(time.Second)
			return
		}
		c.log.Warn("undo rejected", slog.String("subject", m.Subject()), slog.Any("reason", err))
		_ = m.TermWithReason(err.Error())
	default:
		// Like a step's failed attempt: the runner's attempt policy, by the deliveries so far.
		var delivered uint64
		if meta != nil {
			delivered = meta.NumDelivered
		}
		delay := retrypolicy.Attempt().Delay(int(min(max(delivered, 1), 64)) - 1)
		c.log.Warn("undo failed, will retry", slog.String("run_id", ev.Subject), slog.Any("error", err), slog.Duration("delay", delay))
		_ = m.NakWithDelay(delay)
	}
}

type rejection struct{ reason string }

func (r *rejection) Error() string { return r.reason }

// undo runs (or resumes) the undo request id of run. When it cannot start yet (a step, or
// another undo, holds the run) it waits in the record as waiting, and its message is acked:
// the supervisor's sweep sends it again once the run is free.
func (c *Compensator) undo(ctx context.Context, m jetstream.Msg, runID, id string, scope *events.UndoScope, waiting kc.Command) error {
	var sc saga.Scope
	if scope != nil {
		sc = saga.Scope{Where: scope.Where, Step: scope.Step}
	}
	rec, rev, err := c.cfg.Store.Load(ctx, runID)
	switch {
	case errors.Is(err, kc.ErrNotFound):
		return &rejection{"undo: run " + runID + " does not exist"}
	case errors.Is(err, kc.ErrCorrupt), errors.Is(err, kc.ErrForeignEpoch):
		return &rejection{fmt.Sprintf("undo of %s: the checkpoint is not trusted: %v", runID, err)}
	case err != nil:
		return err
	}
	if sc.Step != "" && rec.Index(sc.Step) < 0 {
		return &rejection{fmt.Sprintf("undo of %s: no step %q in the run's pipeline %v", runID, sc.Step, rec.Pipeline)}
	}
	if rec.HasRequest(id) && (rec.Undo == nil || rec.Undo.RequestID != id || rec.Status != kc.Undoing) {
		return nil // done already
	}
	// Undo of a running run cancels it first; while a step (or another undo) holds the run
	// the undo waits in the record, in the same write.
	busy := func(r *kc.Record) bool {
		return r.Lease != nil || (r.Status == kc.Undoing && r.Undo != nil && r.Undo.RequestID != id)
	}
	if rec.Status == kc.Running || rec.Status == kc.WaitingApproval || (busy(rec) && rec.Waiting(id) == nil) {
		var added bool
		rec, rev, err = c.cfg.Store.MutateFrom(ctx, rec, rev, runID, func(r *kc.Record) error {
			added = false
			changed := false
			if r.Status == kc.Running || r.Status == kc.WaitingApproval {
				r.Status = kc.Cancelled
				r.NextAction = "cancelled for an undo"
				changed = true
			}
			if busy(r) {
				var werr error
				if added, werr = r.Wait(waiting); werr != nil {
					return &rejection{fmt.Sprintf("undo of %s: %v", runID, werr)}
				}
				if added {
					r.NextAction = "cancelled; the undo waits for the run's lease"
				}
			}
			if !changed && !added {
				return kc.ErrSkip
			}
			return nil
		})
		if err != nil && !errors.Is(err, kc.ErrSkip) {
			return err
		}
		if added {
			c.record(ctx, runID, "undo.waiting", rev, fmt.Sprintf("undo %s waits for the run's lease", id))
			if err := c.cfg.Faults.Hit(ctx, Step, faults.AfterRecord, 0); err != nil {
				return err
			}
		}
	}
	if l := rec.Lease; l != nil {
		if l.Step == Step { // a step's lease is its runner's to take over, or the supervisor's
			if _, err := c.takeover.ReleaseGone(ctx, runID, *l); err != nil {
				return err
			}
		}
		return nil // it waits in the record
	}
	if busy(rec) {
		return nil // after the other undo
	}
	effects, forged, err := saga.Effects(ctx, c.cfg.JS, c.cfg.Space, intents.Trust(c.cfg.Store), runID)
	if err != nil {
		return err
	}
	refused := c.refuseForged(ctx, runID, forged)
	plan := saga.Plan(effects, rec.Pipeline, sc)
	scopeJSON, _ := json.Marshal(sc)
	h, err := c.cfg.Store.Take(ctx, rec, rev, c.owner, Step, func(r *kc.Record) {
		if r.Undo == nil || r.Undo.RequestID != id {
			prev := r.Status
			if prev == kc.Undoing && r.Undo != nil {
				prev = r.Undo.PreviousStatus
			}
			r.Undo = &kc.Undo{RequestID: id, Scope: scopeJSON, Total: len(plan), PreviousStatus: prev}
			r.AddRequest(id)
		}
		r.DropCommand(id)
		r.Status = kc.Undoing
		r.NextAction = fmt.Sprintf("reverse %d effects of %s, newest first%s", len(plan), runID, refused)
	})
	if errors.Is(err, kc.ErrConflict) || errors.Is(err, kc.ErrLeaseHeld) {
		return fmt.Errorf("run %s changed: %w", runID, errWait) // read again at once: the next delivery waits in the record if it must
	}
	if err != nil {
		return err
	}
	return c.reverse(ctx, m, h, plan, sc)
}

// reverse applies the plan from the record's cursor, then releases the lease with the run
// undone (a whole-run undo) or back at its previous status.
func (c *Compensator) reverse(ctx context.Context, m jetstream.Msg, h *kc.Holder, plan []saga.Effect, sc saga.Scope) error {
	cur, _ := h.Record()
	runID := cur.RunID
	token := fence.Token{RunID: runID, Epoch: c.cfg.Store.Epoch(), Value: h.Token()}
	log := c.log.With(slog.String("run_id", runID), slog.Uint64("token", token.Value))
	if missing := c.unregistered(plan[cur.Undo.Cursor:]); len(missing) > 0 {
		return c.handOver(ctx, h, missing)
	}
	for _, name := range slices.Sorted(maps.Keys(c.cfg.Systems)) {
		if err := c.cfg.Systems[name].RaiseFence(ctx, token, cur); err != nil {
			return c.stop(ctx, h, fmt.Errorf("raising the fence of %s: %w", name, err))
		}
	}
	c.record(ctx, runID, "undo.started", h.Token(), fmt.Sprintf("%d effects of %s", len(plan), describe(sc)))
	for i := cur.Undo.Cursor; i < len(plan); i++ {
		e := plan[i]
		n := i + 1
		if err := c.cfg.Faults.Hit(ctx, Step, faults.BeforeWrite, n); err != nil {
			return c.stop(ctx, h, err)
		}
		// A reversal that fails temporarily is tried again in place; its key makes a repeat
		// of one that landed (its answer lost) a no-op.
		// A reversal longer than the lease keeps it by the heartbeat, as a step's work does:
		// without it the supervisor would find the lease expired and hand the undo to
		// another compensator mid-reversal.
		var made bool
		err := lease.Keep(ctx, c.cfg.Heartbeat, h, func() bool { _ = m.InProgress(); return true }, func(ctx context.Context) error {
			return retrypolicy.Item(c.cfg.RetryAttempts).Do(ctx, runner.IsTemporary, func(int) error {
				var err error
				made, err = c.cfg.Systems[e.Intent.Reverse.System].Reverse(ctx, token, cur, e)
				return err
			})
		})
		if err != nil && refused(err) {
			return c.handOverRefused(ctx, h, e, n, err)
		}
		if err != nil {
			return c.stop(ctx, h, fmt.Errorf("reversing %s: %w", e.Intent.Key, err))
		}
		if err := c.cfg.Faults.Hit(ctx, Step, faults.AfterWrite, n); err != nil {
			return c.stop(ctx, h, err)
		}
		_ = m.InProgress()
		if err := h.Write(ctx, func(r *kc.Record) error {
			r.Undo.Cursor = n
			if made {
				r.Undo.Reversed++
			}
			return nil
		}); err != nil {
			return c.stop(ctx, h, err)
		}
	}
	if err := c.cfg.Faults.Hit(ctx, Step, faults.BeforeCommit, 0); err != nil {
		return c.stop(ctx, h, err)
	}
	err := h.Release(ctx, func(r *kc.Record) error {
		if sc.Empty() {
			r.Status = kc.Undone
			r.NextAction = "nothing: the run is undone"
		} else {
			r.Status = r.Undo.PreviousStatus
			r.NextAction = fmt.Sprintf("undone for %s; the rest of the run stands", describe(sc))
		}
		return nil
	})
	if err != nil {
		return c.stop(ctx, h, err)
	}
	if err := c.cfg.Faults.Hit(ctx, Step, faults.AfterCommit, 0); err != nil {
		log.Warn("fault after the undo's commit", slog.Any("error", err))
	}
	done, _ := h.Record()
	c.record(ctx, runID, "undo.done", h.Token(), fmt.Sprintf("%d of %d effects reversed", done.Undo.Reversed, len(plan)))
	log.Info("undo done", slog.Int("reversed", done.Undo.Reversed), slog.Int("effects", len(plan)))
	return nil
}

// stop ends an undo that could not go on: the lease released (the cursor stays), so the
// command's next delivery resumes it. A fenced compensator writes nothing more.
func (c *Compensator) stop(ctx context.Context, h *kc.Holder, cause error) error {
	if errors.Is(cause, kc.ErrFenced) || errors.Is(cause, fence.ErrFenced) {
		return fmt.Errorf("undo fenced: %w", cause)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := h.Release(wctx, func(r *kc.Record) error { r.NextAction = "undo interrupted: " + cause.Error(); return nil }); err != nil {
		c.log.Warn("releasing the undo's lease", slog.Any("error", err))
	}
	return cause
}

func (c *Compensator) record(ctx context.Context, runID, event string, rev uint64, detail string) {
	_ = c.audit.Record(ctx, events.AuditStepID(runID, Step, event, rev), events.Audit{RunID: runID, Step: Step, Event: event, Owner: c.owner.Name, Detail: detail})
}

// describe says what an undo's scope covers.
func describe(sc saga.Scope) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sc.Where)) {
		parts = append(parts, k+" "+sc.Where[k])
	}
	if sc.Step != "" {
		parts = append(parts, "step "+sc.Step)
	}
	if len(parts) == 0 {
		return "the whole run"
	}
	return strings.Join(parts, " and ")
}
