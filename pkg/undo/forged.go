package undo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/saga"
)

// EventSagaRefused is the timeline event of a saga record the compensator refused.
const EventSagaRefused = "saga.refused"

// maxNamed is how many refused records the record's next action names (it has a size).
const maxNamed = 8

// refuseForged shows a person the saga records of a run the compensator will not act on (a
// record unsigned past the seal, signed by a key not registered for its signer, or by a
// service that does not write its step's records): each on cairn.rejected, under
// CAIRN_SAGA:<seq> with its reason, and on the run's timeline. The records stay on the
// stream. It returns a sentence naming them for the record's next action, "" when none.
func (c *Compensator) refuseForged(ctx context.Context, runID string, forged []saga.Forged) string {
	if len(forged) == 0 {
		return ""
	}
	seqs := make([]string, len(forged))
	for i, f := range forged {
		seqs[i] = fmt.Sprint(f.Seq)
		c.log.Error("saga record refused: not reversed", slog.String("run_id", runID), slog.Uint64("seq", f.Seq), slog.String("reason", f.Reason))
		id := events.RejectedID(c.cfg.Space.Stream(assets.StreamSaga), f.Seq)
		if err := c.audit.Reject(ctx, id, runID, events.NewRejected(c.cfg.Space.Stream(assets.StreamSaga), f.Seq, f.Msg, f.Reason)); err != nil {
			c.log.Warn("recording a refused saga record", slog.String("run_id", runID), slog.Any("error", err))
		}
		c.record(ctx, runID, EventSagaRefused, f.Seq, f.Reason)
	}
	if len(seqs) > maxNamed {
		seqs = append(seqs[:maxNamed], "…")
	}
	c.noteForged(ctx, runID, len(forged), strings.Join(seqs, ", "))
	return fmt.Sprintf("; %d saga records refused, not reversed (%s sequence %s): see %s", len(forged), c.cfg.Space.Stream(assets.StreamSaga), strings.Join(seqs, ", "), c.cfg.Space.Rejected())
}

// noteForged hands the refused saga records of runID to a person: a handover note
// (<run>:handover:undo:forged) naming their sequences, written once. The undo goes on with
// the run's real effects; the note is what a person sees beside the rejections.
func (c *Compensator) noteForged(ctx context.Context, runID string, n int, seqs string) {
	if c.cfg.Handovers == nil {
		return
	}
	id := handover.ID(runID, Step, "forged")
	if noted, _ := handover.Noted(ctx, c.cfg.Handovers, runID, id); noted {
		return
	}
	note := handover.Note{
		ID: id, RunID: runID, Step: Step,
		Error:      kc.CutText(fmt.Sprintf("%d saga records of %s were refused and not reversed (%s sequence %s): unsigned past the seal, or signed by a service that does not write them", n, runID, c.cfg.Space.Stream(assets.StreamSaga), seqs), kc.MaxLastError),
		NextAction: fmt.Sprintf("inspect them (nats stream get %s SEQ) and the rejections on %s; the run's real effects were reversed", c.cfg.Space.Stream(assets.StreamSaga), c.cfg.Space.Rejected()),
		At:         c.cfg.Now().UTC().Format(time.RFC3339Nano),
	}
	if err := handover.Put(ctx, c.cfg.Handovers, note); err != nil {
		c.log.Error("writing the handover note of refused saga records", slog.String("run_id", runID), slog.Any("error", err))
	}
}
