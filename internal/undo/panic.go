package undo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// panicAction is what a person decides after an undo panicked.
const panicAction = "a person decides: fix what made the undo panic, then cairn undo %[1]s again (its reversals are keyed: none is made twice), or cairn resume %[1]s"

// handoverPanic settles an undo command whose handling panicked. The command is rejected (on
// cairn.rejected, with the panic) and consume.Recover terms it; and when the run is in an
// undo this compensator holds, or one no one holds, the undo is handed over: a note naming
// the panic, then the record (status handed_over, the lease released, the cursor kept) in
// one compare-and-set. Without the handover the supervisor's sweep would send the undo
// again once its lease expired, and it would panic again, for ever.
func (c *Compensator) handoverPanic(ctx context.Context, m jetstream.Msg, nm *nats.Msg, seq uint64, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	runID, _, _ := events.ParseRunSubject(m.Subject())
	if rerr := c.audit.Reject(ctx, events.RejectedID(assets.StreamRuns, seq), runID, events.NewRejected(assets.StreamRuns, seq, nm, cause.Error())); rerr != nil {
		c.log.Error("recording a rejected undo", slog.Any("error", rerr))
	}
	if runID == "" {
		return
	}
	rec, rev, err := c.cfg.Store.Load(ctx, runID)
	if err != nil || !c.handable(rec) {
		return // no run, one not trusted (its readers hand it over), or not in an undo of ours
	}
	note := runner.HandoverNote{
		ID: runID + ":handover:" + Step + ":panic", RunID: runID, Step: Step,
		Error:      cut(fmt.Sprintf("the compensator panicked during undo %s: %v", rec.Undo.RequestID, cause), kc.MaxLastError),
		NextAction: fmt.Sprintf(panicAction, runID),
		At:         c.cfg.Now().UTC().Format(time.RFC3339Nano),
	}
	if c.cfg.Handovers != nil {
		if b, err := json.Marshal(note); err == nil {
			if _, err := c.cfg.Handovers.Put(ctx, runID, b); err != nil {
				c.log.Error("writing handover note", slog.String("run_id", runID), slog.Any("error", err))
			}
		}
	}
	_, rev, err = c.cfg.Store.MutateFrom(ctx, rec, rev, runID, func(r *kc.Record) error {
		if !c.handable(r) {
			return kc.ErrSkip
		}
		r.Status = kc.HandedOver
		r.Lease = nil
		r.Handover = &note.ID
		r.NextAction = note.NextAction
		return nil
	})
	if err != nil {
		if !errors.Is(err, kc.ErrSkip) {
			c.log.Error("recording the handover of a panicked undo", slog.String("run_id", runID), slog.Any("error", err))
		}
		return
	}
	c.record(ctx, runID, "undo.handover", rev, cut(note.Error, 512))
	c.log.Error("undo handed over: it panicked", slog.String("run_id", runID), slog.String("request_id", rec.Undo.RequestID),
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

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
