package supervisor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// FaultPoint is the step name of the supervisor's crash points (CAIRN_FAULTS
// supervisor.after-record=…): after a command's record write, before what follows it (the
// step event, the ack).
const FaultPoint = "supervisor"

// Waiting returns the entry of a command that must wait for the run's lease: who asked, when,
// and the command's own data, so whoever next finds the run free can carry it out.
func Waiting(verb string, ev events.Event, c events.Command, at string) kc.Command {
	args := events.Command{From: c.From, AfterFix: c.AfterFix, Scope: c.Scope}
	var raw json.RawMessage
	if b, err := json.Marshal(args); err == nil && string(b) != "{}" {
		raw = b
	}
	return kc.Command{Verb: verb, RequestID: ev.ID, By: ev.Source, At: at, Args: raw}
}

// commandWaits records a command that waits in r; refused (a rejection) when too many wait.
func commandWaits(r *kc.Record, c kc.Command) (bool, error) {
	added, err := r.Wait(c)
	if err != nil {
		return false, reject("%s of %s: %v", c.Verb, r.RunID, err)
	}
	return added, nil
}

// hit fires the supervisor's crash point after a command's record write.
func (s *Supervisor) hit(ctx context.Context) error {
	return s.cfg.Faults.Hit(ctx, FaultPoint, faults.AfterRecord, 0)
}

// drive carries out each command waiting in a run whose lease is free again: its own
// commands (resume, rerun) the supervisor applies itself; an undo, the compensator's, it
// publishes again. Each keeps its request id, so carrying it out twice is a no-op; an undo's
// message id is the revision the sweep saw, so each sweep of one revision is one message.
func (s *Supervisor) drive(ctx context.Context, rec *kc.Record, rev uint64) error {
	for _, w := range rec.Commands {
		if w.Verb != events.VerbUndo {
			if err := s.applyWaiting(ctx, rec.RunID, w); err != nil {
				return err
			}
			continue
		}
		m, err := CommandMsg(s.cfg.Space, rec.RunID, w, fmt.Sprintf("%s:again:%d", w.RequestID, rev), s.cfg.Now())
		if err != nil {
			return err
		}
		if _, err := s.cfg.JS.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("publishing the waiting %s of %s again: %w", w.Verb, rec.RunID, err)
		}
		s.log.Info("waiting undo published again", slog.String("run_id", rec.RunID), slog.String("request_id", w.RequestID))
	}
	return nil
}

// applyWaiting applies a waiting command of the supervisor's own; one refused now (the run
// moved on) ends its wait, refused on cairn.rejected like any command.
func (s *Supervisor) applyWaiting(ctx context.Context, runID string, w kc.Command) error {
	m, err := CommandMsg(s.cfg.Space, runID, w, w.RequestID, s.cfg.Now())
	if err != nil {
		return err
	}
	ev, err := events.Decode(m)
	if err != nil {
		return err
	}
	err = s.apply(ctx, ev)
	var rej *rejection
	if !errors.As(err, &rej) {
		return err
	}
	_, rev, derr := s.cfg.Store.Mutate(ctx, runID, func(r *kc.Record) error {
		if !r.DropCommand(w.RequestID) {
			return kc.ErrSkip
		}
		return nil
	})
	if errors.Is(derr, kc.ErrSkip) {
		return nil
	}
	if derr != nil {
		return derr
	}
	s.record(ctx, events.AuditStepID(runID, "run", "command.refused", rev), events.Audit{RunID: runID, Event: "command.refused", Detail: cut(w.Verb+" "+w.RequestID+": "+rej.Error(), 512)})
	return nil
}

// CommandMsg is a waiting command as a message on its run's subject: its event id is the
// request id, its Nats-Msg-Id msgID.
func CommandMsg(sp assets.Space, runID string, w kc.Command, msgID string, now time.Time) (*nats.Msg, error) {
	typ, ok := events.CommandType(w.Verb)
	if !ok {
		return nil, fmt.Errorf("waiting command %s of %s: unknown verb %q", w.RequestID, runID, w.Verb)
	}
	var c events.Command
	if len(w.Args) > 0 {
		if err := json.Unmarshal(w.Args, &c); err != nil {
			return nil, fmt.Errorf("waiting command %s of %s: %w", w.RequestID, runID, err)
		}
	}
	c.RequestID = w.RequestID
	e, err := events.New(w.RequestID, typ, source, runID, now, c)
	if err != nil {
		return nil, err
	}
	m, err := events.Encode(sp.Run(runID, w.Verb), e)
	if err != nil {
		return nil, err
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	return m, nil
}

// named lists the commands that wait, for a handover's note.
func named(cs []kc.Command) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s %s by %s at %s", c.Verb, c.RequestID, c.By, c.At))
	}
	return strings.Join(parts, "; ")
}

// CommandAdvisorySubject is where the server announces run commands (on the control and the
// compensator durables) that reached their delivery limit.
var CommandAdvisorySubject = assets.Default.MaxDeliveries(assets.StreamRuns)

// onCommandMaxDeliveries keeps a command that reached its durable's MaxDeliver (each delivery
// failed for a reason of the moment): it is written into its run's record as waiting, for the
// sweep to carry out, and only then removed from the stream. A start, which has no record
// yet, is refused on cairn.rejected with the reason, never dropped in silence.
func (s *Supervisor) onCommandMaxDeliveries(ctx context.Context, m *nats.Msg) {
	adv, stream, raw, ok := s.deadMessage(ctx, m, s.runStream())
	if !ok {
		return
	}
	nm := &nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data}
	if err := s.keep(ctx, nm, adv); err != nil {
		s.log.Warn("keeping a command past its delivery limit", slog.String("subject", raw.Subject), slog.Any("error", err))
		return // the message stays in the stream; the next advisory (none) or a person sees it
	}
	if err := stream.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		s.log.Warn("removing a command past its delivery limit", slog.Uint64("seq", adv.StreamSeq), slog.Any("error", err))
	}
}

func (s *Supervisor) keep(ctx context.Context, nm *nats.Msg, adv maxDeliveries) error {
	reason := fmt.Sprintf("delivered %d times (max deliver on %s) and never carried out", adv.Deliveries, adv.Consumer)
	refuse := func(runID, why string) error {
		return s.audit.Reject(ctx, events.RejectedID(s.runStream(), adv.StreamSeq), runID, events.NewRejected(s.runStream(), adv.StreamSeq, nm, why))
	}
	ev, err := events.DecodeCommand(s.cfg.Space, nm, fmt.Sprintf("seq-%d", adv.StreamSeq))
	if err != nil {
		return refuse("", err.Error())
	}
	_, verb, _ := events.ParseRunSubject(s.cfg.Space, nm.Subject)
	if verb == events.VerbStart {
		return refuse(ev.Subject, "start "+reason+": start it again")
	}
	var c events.Command
	if err := ev.Unmarshal(&c); err != nil {
		return refuse(ev.Subject, err.Error())
	}
	if verb == events.VerbUndo && c.RequestID != "" {
		ev.ID = c.RequestID // the compensator's request id is the data's
	}
	w := Waiting(verb, ev, c, s.stamp())
	_, rev, err := s.cfg.Store.Mutate(ctx, ev.Subject, func(r *kc.Record) error {
		if r.HasRequest(ev.ID) {
			return kc.ErrSkip
		}
		added, err := commandWaits(r, w)
		if err != nil || !added {
			return cmp.Or(err, kc.ErrSkip)
		}
		return nil
	})
	var rej *rejection
	switch {
	case errors.Is(err, kc.ErrSkip):
		return nil
	case errors.Is(err, kc.ErrNotFound):
		return refuse(ev.Subject, fmt.Sprintf("%s: run %s does not exist", verb, ev.Subject))
	case errors.As(err, &rej):
		return refuse(ev.Subject, rej.Error())
	case err != nil:
		return err
	}
	s.record(ctx, events.AuditStepID(ev.Subject, "run", "command.waiting", rev), events.Audit{RunID: ev.Subject, Event: "command.waiting", Detail: verb + " " + w.RequestID + " " + reason + "; kept in the record"})
	return nil
}
