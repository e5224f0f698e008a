package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"

	"github.com/cairnhq/cairn/internal/intents"
	"github.com/cairnhq/cairn/pkg/saga"
)

// What a step's record says of its inputs and of its outside writes, beyond what the step
// returns: the input fingerprint and the intents without an outcome.

// snapshotInput names the run's snapshot among an attempt's inputs.
const snapshotInput = "snapshot"

// inputRead is one input an attempt read: an earlier step's output, or the snapshot.
type inputRead struct{ name, digest string }

func (a *Attempt) read(name, digest string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	in := inputRead{name, digest}
	if !slices.Contains(a.reads, in) {
		a.reads = append(a.reads, in)
	}
}

// inputFingerprint is every step's input_fingerprint: "sha256:" and the hex sha256 of the
// run's params, the earlier outputs the attempt read (step name and output digest, in the
// order first read; the snapshot as "snapshot"), and what the step itself says it read
// from outside (Result.InputFingerprint, such as the digest of the documents fetch listed),
// folded in rather than kept alone so that the field means one thing for every step. Two
// attempts that read the same things have the same fingerprint.
func (a *Attempt) inputFingerprint(outside string) string {
	params := a.Params.Ordered(a.r.cfg.Pipeline.Input)
	b := make([]byte, 0, 256)
	b = append(append(append(b, "params "...), params...), '\n')
	a.mu.Lock()
	for _, in := range a.reads {
		b = append(append(append(append(append(b, "input "...), in.name...), ' '), in.digest...), '\n')
	}
	a.mu.Unlock()
	if outside != "" {
		b = append(append(append(b, "outside "...), outside...), '\n')
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// readTally reads the step's saga records once an attempt; a.mu is held.
func (a *Attempt) readTally(ctx context.Context) error {
	if a.tally != nil {
		return nil
	}
	t, err := saga.ReadTally(ctx, a.r.cfg.JS, a.r.cfg.Space, intents.Trust(a.r.cfg.Store), a.RunID, a.Step, a.Generation)
	if err != nil {
		return Temporary(fmt.Errorf("reading the saga records of %s: %w", a.Step, err))
	}
	for _, f := range t.Forged {
		a.log.Error("saga record refused, not counted", slog.Uint64("seq", f.Seq), slog.String("reason", f.Reason))
	}
	a.tally = t
	return nil
}

// countIntents makes the attempt's count of open intents exact before a commit or a
// failure records it: a step that writes outside and recorded nothing this attempt (or
// whose last record may or may not be stored) reads its records, since an earlier attempt
// may have left intents open; a step that does not write outside has none. It reports
// whether there is a count; a read that fails leaves none, and the field as it was.
func (r *Runner) countIntents(ctx context.Context, a *Attempt) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tally == nil && !r.def.Writes() {
		return 0, false
	}
	// A failure's own write must not wait on this read: it gets a part of the time.
	rctx, cancel := context.WithTimeout(ctx, intents.CountTimeout)
	defer cancel()
	if err := a.readTally(rctx); err != nil {
		a.log.Warn("intents_open not counted", slog.Any("error", err))
		return 0, false
	}
	return a.tally.Open(), true
}
