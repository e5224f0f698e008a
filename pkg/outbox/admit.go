package outbox

import (
	"context"
	"errors"
	"fmt"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// RecordAdmission is the admission rule of DESIGN.md read from the runs' checkpoints, for
// SenderConfig.Admit: a message of a run that has no record is dropped, and so is one of an
// older generation than its run's, or queued under a token below the one its step committed
// with (a copy of an attempt that lost its lease). A record that cannot be read or trusted
// (corrupt, of another epoch) is an error, so the message waits for a person instead of
// going out on the word of a record nobody trusts. The sender never asks about a notice
// (Message.Notice): the notice of a run whose record cannot be trusted is the one a person
// needs most.
func RecordAdmission(store *kc.Store) func(ctx context.Context, m Message) (bool, string, error) {
	return func(ctx context.Context, m Message) (bool, string, error) {
		rec, _, err := store.Load(ctx, m.RunID)
		if errors.Is(err, kc.ErrNotFound) {
			return false, "no run " + m.RunID, nil
		}
		if err != nil {
			return false, "", fmt.Errorf("loading the record of %s: %w", m.RunID, err)
		}
		if m.Generation < rec.Generation {
			return false, fmt.Sprintf("generation %d is older than the run's %d", m.Generation, rec.Generation), nil
		}
		if s, ok := rec.Steps[m.Step]; ok && s.Token != nil && m.Token < *s.Token {
			return false, fmt.Sprintf("token %d is below the %d its step committed with", m.Token, *s.Token), nil
		}
		return true, "", nil
	}
}
