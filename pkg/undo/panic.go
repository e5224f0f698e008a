package undo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// panicAction is what a person decides after an undo panicked.
const panicAction = "a person decides: fix what made the undo panic, then cairn undo %[1]s again (its reversals are keyed: none is made twice), or cairn resume %[1]s"

// handoverPanic settles an undo command (request id, "" before it decoded) whose handling
// panicked. The command is rejected (on cairn.rejected, with the panic) and consume.Recover
// terms it; and when the run is in an undo this compensator holds, or one no one holds, the
// undo is handed over: a note naming the panic, then the record (status handed_over, the
// lease released, the cursor kept) in one compare-and-set. Without the handover the
// supervisor's sweep would send the undo again once its lease expired, and it would panic
// again, for ever. An undo that panicked while it waited in the record for the run's lease
// leaves it, the record naming the panic and the note, so the sweep does not send it again
// either.
func (c *Compensator) handoverPanic(ctx context.Context, m jetstream.Msg, nm *nats.Msg, seq uint64, id string, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	runID, _, _ := events.ParseRunSubject(c.cfg.Space, m.Subject())
	stream := c.cfg.Space.Stream(assets.StreamRuns)
	if rerr := c.audit.Reject(ctx, events.RejectedID(stream, seq), runID, events.NewRejected(stream, seq, nm, cause.Error())); rerr != nil {
		c.log.Error("recording a rejected undo", slog.Any("error", rerr))
	}
	if runID == "" {
		return
	}
	rec, rev, err := c.cfg.Store.Load(ctx, runID)
	if err != nil {
		return // no run, or one not trusted (its readers hand it over)
	}
	waiting := id != "" && c.waits(rec, id)
	if !waiting && !c.handable(rec) {
		return // not in an undo of ours: the rejection is all
	}
	if !waiting {
		id = rec.Undo.RequestID
	}
	note := handover.Note{
		ID: handover.ID(runID, Step, "panic"), RunID: runID, Step: Step,
		Error:      cut(fmt.Sprintf("the compensator panicked during undo %s: %v", id, cause), kc.MaxLastError),
		NextAction: fmt.Sprintf(panicAction, runID),
		At:         c.cfg.Now().UTC().Format(time.RFC3339Nano),
	}
	c.putNote(ctx, note)
	_, rev, err = c.cfg.Store.MutateFrom(ctx, rec, rev, runID, func(r *kc.Record) error {
		switch {
		case waiting && c.waits(r, id):
			r.DropCommand(id) // the lease stays its holder's; the run's status stays
		case !waiting && c.handable(r):
			r.Status = kc.HandedOver
			r.Lease = nil
		default:
			return kc.ErrSkip
		}
		handover.Name(r, note)
		return nil
	})
	if err != nil {
		if !errors.Is(err, kc.ErrSkip) {
			c.log.Error("recording the handover of a panicked undo", slog.String("run_id", runID), slog.Any("error", err))
		}
		return
	}
	c.record(ctx, runID, "undo.handover", rev, cut(note.Error, 512))
	c.log.Error("undo handed over: it panicked", slog.String("run_id", runID), slog.String("request_id", id), slog.Bool("waiting", waiting),
		slog.String("handover", note.ID), slog.Any("error", cause))
}

// handable: the run is in an undo this compensator holds, or in one no one holds (a resumed
// undo that panicked before it took the lease).
func (c *Compensator) handable(r *kc.Record) bool {
	if r.Status != kc.Undoing || r.Undo == nil {
		return false
	}
	return r.Lease == nil || (r.Lease.Step == Step && r.Lease.Owner == c.owner.Name)
}

// waits: the undo id waits in the record for the run's lease, in a record the compensator
// may write (one it cancelled for the undo, or one with an undo of its own).
func (c *Compensator) waits(r *kc.Record, id string) bool {
	return r.Waiting(id) != nil && (r.Status == kc.Cancelled || r.Undo != nil)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
