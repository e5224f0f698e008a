package undo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
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
		id := events.RejectedID(assets.StreamSaga, f.Seq)
		if err := c.audit.Reject(ctx, id, runID, events.NewRejected(assets.StreamSaga, f.Seq, f.Msg, f.Reason)); err != nil {
			c.log.Warn("recording a refused saga record", slog.String("run_id", runID), slog.Any("error", err))
		}
		c.record(ctx, runID, EventSagaRefused, f.Seq, f.Reason)
	}
	if len(seqs) > maxNamed {
		seqs = append(seqs[:maxNamed], "…")
	}
	return fmt.Sprintf("; %d saga records refused, not reversed (%s sequence %s): see cairn.rejected", len(forged), assets.StreamSaga, strings.Join(seqs, ", "))
}
