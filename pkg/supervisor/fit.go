package supervisor

import (
	"context"
	"strings"

	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// mutate is Store.Mutate for a command's effect. An effect that would leave the record less
// room than its current step and the other writers need (kvcheckpoint.CommandRoom: the step
// committing, or failing and being handed over; an approval, an undo) is refused before
// anything is written, a rejection recorded like any other: no command may wedge a run whose
// later writes would then all be too large. The steps after the current one check their own
// room before any outside effect, as every step does, so a rerun or a resume --after-fix of a
// whole night is not refused for what they may write. An effect that frees room, or takes
// none, is never refused; nor is a command that waits in the record (Record.Wait has the
// current step's rule).
func (s *Supervisor) mutate(ctx context.Context, ev events.Event, change func(*kc.Record) error) (*kc.Record, uint64, error) {
	return s.cfg.Store.Mutate(ctx, ev.Subject, func(r *kc.Record) error {
		before, waiting := kc.CommandRoom(r), len(r.Commands)
		if err := change(r); err != nil {
			return err
		}
		if len(r.Commands) > waiting {
			return nil // the command waits: Record.Wait kept it within the current step's room
		}
		if after := kc.CommandRoom(r); after < 0 && after < before {
			return reject("%s %s of %s refused: its effect would leave the record %d bytes short of the room its run may still need (records are at most %d bytes)",
				verbOf(ev), ev.ID, r.RunID, -after, kc.MaxSize)
		}
		return nil
	})
}

// verbOf is the command's verb, from its type (io.cairn.run.<verb>.v1).
func verbOf(ev events.Event) string {
	return strings.TrimSuffix(strings.TrimPrefix(ev.Type, "io.cairn.run."), ".v1")
}
