package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/consume"
	"github.com/cairnhq/cairn/pkg/events"
)

// reasonRecord is the handover reason of a run whose record cannot be trusted (a sum that
// does not hold, a broken invariant) or whose sweep panicked.
const reasonRecord = "record"

// untrusted is a checkpoint entry the watch could not trust: never swept nor acted on, its
// run handed over by a note alone (the entry kept for a person), once per revision.
type untrusted struct {
	rev   uint64
	cause error
	noted bool
}

// distrust keeps the entry of key at rev, which decoded to err, for a note; s.mu is held.
func (s *Supervisor) distrust(key string, rev uint64, err error) {
	if prev, ok := s.bad[key]; ok && prev.rev == rev {
		return
	}
	s.bad[key] = untrusted{rev: rev, cause: err}
}

// noteUntrusted hands over, by a note alone, every run whose latest record the watch could
// not trust and that has no note for it yet: the record is not written (it is not trusted),
// nothing is resumed, a person inspects the entry.
func (s *Supervisor) noteUntrusted(ctx context.Context) {
	s.mu.Lock()
	var todo []string
	for key, u := range s.bad {
		if !u.noted {
			todo = append(todo, key)
		}
	}
	s.mu.Unlock()
	for _, key := range todo {
		s.mu.Lock()
		u, ok := s.bad[key]
		s.mu.Unlock()
		if !ok || u.noted {
			continue
		}
		if err := s.noteOnly(ctx, key, "", u.cause); err != nil {
			s.log.Warn("handing over an untrusted record", slog.String("run_id", key), slog.Any("error", err))
			if !errors.Is(err, events.ErrInvalidID) {
				continue // noted at a later sweep
			}
		}
		s.mu.Lock()
		if cur, ok := s.bad[key]; ok && cur.rev == u.rev {
			cur.noted = true
			s.bad[key] = cur
		}
		s.mu.Unlock()
	}
	s.flushNotices(ctx)
}

// noteOnly writes the handover note of a run the supervisor cannot act on, the record
// untouched: the same note id as the runner's (handover.Untrusted), so the run is noted once.
func (s *Supervisor) noteOnly(ctx context.Context, runID, step string, cause error) error {
	if err := events.ValidID("run_id", runID); err != nil {
		return err
	}
	note := handover.Untrusted(s.cfg.Space, runID, step, cause, s.stamp())
	if noted, err := handover.Noted(ctx, s.cfg.Handovers, runID, note.ID); err != nil {
		return fmt.Errorf("reading the handover note of %s: %w", runID, err)
	} else if noted {
		return nil
	}
	if err := handover.Put(ctx, s.cfg.Handovers, note); err != nil {
		return err
	}
	s.notifyUntrusted(ctx, note)
	s.cfg.Metrics.Handovers.WithLabelValues(cmpStep(step), reasonRecord).Inc()
	s.record(ctx, events.AuditStepID(runID, cmpStep(step), "handover", 0), events.Audit{RunID: runID, Step: step, Event: "handover", Detail: cut(cause.Error(), 512)})
	s.log.Error("run handed over: its record is not trusted", slog.String("run_id", runID), slog.Any("error", cause))
	return nil
}

// sweepGuarded sweeps one watched run; a panic is logged with its stack and the run
// handed over by a note alone, and the run is not swept again until its record changes.
func (s *Supervisor) sweepGuarded(ctx context.Context, w watched, startup bool) {
	defer consume.Recover(s.log, nil, func(err error) {
		s.mu.Lock()
		s.panicked[w.rec.RunID] = w.rev
		s.mu.Unlock()
		if nerr := s.noteOnly(ctx, w.rec.RunID, "", fmt.Errorf("sweeping the run at revision %d: %w", w.rev, err)); nerr != nil {
			s.log.Warn("handing over a run whose sweep panicked", slog.String("run_id", w.rec.RunID), slog.Any("error", nerr))
		}
	})
	s.sweepWatched(ctx, w, startup)
}

// rejectPanic records a command whose handling panicked as rejected, as a refused command
// is; consume.Recover then terms it.
func (s *Supervisor) rejectPanic(ctx context.Context, m jetstream.Msg, seq uint64, err error) {
	nm := natsMsg(m)
	runID, _, _ := events.ParseRunSubject(s.cfg.Space, m.Subject())
	if rerr := s.audit.Reject(ctx, events.RejectedID(s.runStream(), seq), runID, events.NewRejected(s.runStream(), seq, nm, err.Error())); rerr != nil {
		s.log.Error("recording a rejected command", slog.Any("error", rerr))
	}
	s.cfg.Metrics.Commands.WithLabelValues("invalid", "rejected").Inc()
}
