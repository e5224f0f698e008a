package runner

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/saga"
)

// Space is the pipeline's share of the NATS account the attempt runs in (the zero Space is
// the reference night's): where its outbox, saga and timeline are.
func (a *Attempt) Space() assets.Space { return a.r.cfg.Space }

// Queue queues msgs on the run's outbox (the pipeline's space's), in order, each one outside
// write of the step through Keyed: its saga intent (to whom, the subject, the digest of the
// text: outbox.Digest) is on CAIRN_SAGA before the message is queued, and its outcome after.
// The pipeline's outbox sender (app.Config.Outbox) delivers each message once.
//
// Queue fills in what is the attempt's: RunID and Step (a message naming another run or step
// is refused), Generation, Token and Shadow, and QueuedAt (the message's Date: header) when
// zero, as the run's start, the same on every attempt. The message is signed as the step.
//
// The key is what makes a message go once: it must begin with "<run_id>:" and be built from
// ids only (r-1:receipt:<order id>), never from a time or an attempt, so that the retry of
// a failed attempt queues the same keys. A retry's copy (a higher token) is stored beside the
// failed attempt's and the outbox's marks send the key once; a retry that would queue another
// text under a key an earlier attempt recorded is refused before anything is queued
// (idempotency.ErrConflict, naming both digests), and the run is handed over. A message
// queued here is not reversed by an undo: what went out stays out (QueueWithdrawable gives
// a message its withdrawal).
//
// Every message is checked before any is queued: a broken rule is an error naming the
// message and the rule (outbox.ErrInvalid), and nothing is queued.
func (a *Attempt) Queue(ctx context.Context, msgs ...outbox.Message) error {
	ws := make([]Withdrawable, len(msgs))
	for i, m := range msgs {
		ws[i] = Withdrawable{Message: m}
	}
	return a.queue(ctx, ws)
}

// Withdrawable is a message and the withdrawal an undo of the run sends in its place when
// the message may have gone (QueueWithdrawable).
type Withdrawable struct {
	Message outbox.Message
	// Withdrawal is sent by the undo, under its own Key (beginning with the run id, built
	// from ids only, as the message's), when the message was handed to the sender; a message
	// never handed to it is cancelled instead and no withdrawal is sent. Kind defaults to
	// "withdraw"; RunID, Reverses (the message's key) and the rest of what is the attempt's
	// are filled in as Queue fills a message's; Step, Token and QueuedAt are the undo's.
	Withdrawal outbox.Message
	// Attrs are the message's attributes, which an undo's scope selects by.
	Attrs map[string]string
}

// QueueWithdrawable queues each message as Queue does, with its withdrawal recorded as its
// reversal (system saga.Mail) on the saga intent. An undo of the run (app.Config.Outbox runs
// the compensator) then cancels a message still waiting for the sender, and for one that may
// have gone queues its withdrawal, sent once by its key however often the undo is repeated.
func (a *Attempt) QueueWithdrawable(ctx context.Context, ws ...Withdrawable) error {
	ws = slices.Clone(ws) // the caller's slice is left as it was
	for i := range ws {
		ws[i].Withdrawal.Kind = cmp.Or(ws[i].Withdrawal.Kind, "withdraw")
	}
	return a.queue(ctx, ws)
}

func (a *Attempt) queue(ctx context.Context, ws []Withdrawable) error {
	filled := make([]outbox.Message, len(ws))
	reverses := make([]*saga.Reverse, len(ws))
	var errs []error
	for i, w := range ws {
		var err error
		if filled[i], err = a.fill(w.Message); err != nil {
			errs = append(errs, err)
			continue
		}
		if w.Withdrawal.Kind == "" {
			continue // no withdrawal: Queue's message
		}
		if w.Withdrawal.Reverses != "" && w.Withdrawal.Reverses != filled[i].Key {
			errs = append(errs, fmt.Errorf("%w %q: the withdrawal of %q reverses %q", outbox.ErrInvalid, w.Withdrawal.Key, filled[i].Key, w.Withdrawal.Reverses))
			continue
		}
		if w.Withdrawal.Key == filled[i].Key {
			errs = append(errs, fmt.Errorf("%w %q: a withdrawal needs a key of its own, not its message's", outbox.ErrInvalid, w.Withdrawal.Key))
			continue
		}
		wd := w.Withdrawal
		wd.Reverses = filled[i].Key
		if wd, err = a.fill(wd); err != nil {
			errs = append(errs, fmt.Errorf("the withdrawal of %q: %w", filled[i].Key, err))
			continue
		}
		b, err := json.Marshal(wd)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reverses[i] = &saga.Reverse{System: saga.Mail, Key: wd.Key, Payload: b}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	effs := make([]Effect, len(filled))
	for i, m := range filled {
		sum := sha256.Sum256([]byte(m.Body))
		effs[i] = Effect{Key: m.Key, Digest: outbox.Digest(m), Attrs: ws[i].Attrs, Reverse: reverses[i], Payload: queuedIntent{Kind: m.Kind, To: m.To, Subject: m.Subject,
			BodyDigest: "sha256:" + hex.EncodeToString(sum[:]), BodySize: len(m.Body)}}
	}
	opts := []outbox.QueueOption{outbox.In(a.Space()), outbox.SignedBy(a.Signer())}
	return a.Keyed(ctx, effs, func(ctx context.Context, i int) (*saga.Receipt, error) {
		return nil, outbox.Queue(ctx, a.JS(), filled[i], opts...)
	})
}

// queuedIntent is what a message's saga intent records of it: not its body (the message is
// on the outbox), so that the record stays small whatever the size of the text.
type queuedIntent struct {
	Kind       string   `json:"kind"`
	To         []string `json:"to"`
	Subject    string   `json:"subject"`
	BodyDigest string   `json:"body_digest"`
	BodySize   int      `json:"body_size"`
}

// fill is m as the attempt queues it, or why it may not.
func (a *Attempt) fill(m outbox.Message) (outbox.Message, error) {
	var problems []string
	if m.RunID != "" && m.RunID != a.RunID {
		problems = append(problems, fmt.Sprintf("run_id %q is not the attempt's run %q", m.RunID, a.RunID))
	}
	if m.Step != "" && m.Step != a.Step {
		problems = append(problems, fmt.Sprintf("step %q is not the attempt's step %q", m.Step, a.Step))
	}
	if !strings.HasPrefix(m.Key, a.RunID+":") {
		problems = append(problems, fmt.Sprintf("key does not begin with the run id and a colon (%q)", a.RunID+":"))
	}
	if m.Requeue != 0 {
		problems = append(problems, "requeue is set: only a resume queues a copy again")
	}
	if len(problems) > 0 {
		return m, fmt.Errorf("%w %q: %s", outbox.ErrInvalid, m.Key, strings.Join(problems, "; "))
	}
	m.RunID, m.Step, m.Generation, m.Token, m.Shadow = a.RunID, a.Step, a.Generation, a.Token.Value, a.Params.Shadow
	if m.QueuedAt.IsZero() {
		m.QueuedAt = a.started()
	}
	return m, m.Validate()
}

// started is the run's start, a time that is the same on every attempt.
func (a *Attempt) started() time.Time {
	t, err := time.Parse(time.RFC3339Nano, a.rec.CreatedAt)
	if err != nil {
		return time.Unix(0, 0).UTC()
	}
	return t
}
