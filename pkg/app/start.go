package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// ErrNoAnswer: a start was sent, but no supervisor answered it before the caller's context
// ended (none runs, or it is far behind).
var ErrNoAnswer = errors.New("no answer from the supervisor")

// Refused is a start the supervisor refused, as it recorded the refusal on the space's
// rejected subject (assets.Space.Rejected): the run id exists with other parameters,
// another run has this input already (the natural key; Holder names that run), or the
// pipeline's CheckInput refused the input. StartIn and Wait return it; find it with
// errors.As.
type Refused struct {
	RunID string // the run the refused start was for
	// Holder is the run that has this input already, read from the claim on the input's
	// natural key when that is why; "" for any other reason, or when the claim could not be
	// read (the night's, whose definition is not registered). Reason names it either way.
	Holder string
	Reason string    // the supervisor's, as its refusal records it
	At     time.Time // when the supervisor refused it
}

func (e *Refused) Error() string { return fmt.Sprintf("start of %s refused: %s", e.RunID, e.Reason) }

// Started is the supervisor's answer to a start it took.
type Started struct {
	Record *kc.Record // the run's record when the answer came
	// Again: the run existed already with these parameters, so the start made no second
	// run (the supervisor only sends a first step's event again while it waits).
	Again bool
}

// StartIn is the one way a start is sent and answered, for Start and `cairn start` alike: it
// publishes c on space sp's start subject as a CloudEvent from source (a URI reference such
// as /cairn/cli, which the run's timeline records as who started it) and waits for the
// supervisor's answer. c names its run (RunID; a pipeline's DefaultRunID gives the usual
// one) and itself (RequestID: sending the same start again, with the same id and input,
// starts one run).
//
// It returns once the run's record holds c's request id, or once the run exists with equal
// parameters (Started.Again); a *Refused when the supervisor refuses the start; and an
// error wrapping ErrNoAnswer and ctx's error when ctx ends first, so give ctx a deadline. A
// record that fails its checks (kvcheckpoint.ErrCorrupt, ErrForeignEpoch, ErrNewerSchema)
// is an error before anything is sent.
func StartIn(ctx context.Context, js jetstream.JetStream, sp assets.Space, source string, c events.StartCommand) (*Started, error) {
	if c.RunID == "" {
		return nil, fmt.Errorf("%w: start: no run id (a pipeline's DefaultRunID names one from the input)", events.ErrInvalid)
	}
	if c.RequestID == "" {
		return nil, fmt.Errorf("%w: start of %s: no request id, which makes sending the start twice start one run", events.ErrInvalid, c.RunID)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	store, err := kc.Open(ctx, js, sp.Bucket(assets.BucketRuns))
	if err != nil {
		return nil, fmt.Errorf("start of %s: %w", c.RunID, err)
	}
	// The watch begins before the start is sent, so no answer can come unseen.
	w, err := store.KV().Watch(ctx, c.RunID)
	if err != nil {
		return nil, fmt.Errorf("start of %s: watching its record: %w", c.RunID, err)
	}
	defer func() { _ = w.Stop() }()
	existing, err := current(ctx, store, w)
	if err != nil {
		return nil, fmt.Errorf("start of %s: %w", c.RunID, err)
	}
	rejected, err := js.Stream(ctx, sp.Stream(assets.StreamRejected))
	if err != nil {
		return nil, fmt.Errorf("start of %s: the refusals' stream: %w", c.RunID, err)
	}
	from := rejected.CachedInfo().State.LastSeq + 1 // refusals of this start come after it

	e, err := events.New(c.RequestID, events.TypeRunStart, source, c.RunID, time.Now(), c)
	if err != nil {
		return nil, err
	}
	m, err := events.Encode(sp.RunStart(), e)
	if err != nil {
		return nil, err
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("publishing the start of %s on %s: %w", c.RunID, sp.RunStart(), err)
	}
	params := kc.Params{Input: c.Params, Shadow: c.Shadow}
	if existing != nil && existing.Params.Equal(params) {
		return &Started{Record: existing, Again: true}, nil
	}
	if ack.Duplicate {
		from = 1 // the stream had this start already: its refusal, if any, may be history
	}
	refusals, stop, err := followRefusals(ctx, js, sp, rejected, c.RunID, from, func(r refusal) bool { return r.requestID == c.RequestID })
	if err != nil {
		return nil, fmt.Errorf("start of %s: %w", c.RunID, err)
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("start of %s sent (request %s), but %w came before %w: is the supervisor running?", c.RunID, c.RequestID, ErrNoAnswer, ctx.Err())
		case r := <-refusals:
			holder := ""
			if _, _, err := store.Load(ctx, c.RunID); errors.Is(err, kc.ErrNotFound) {
				holder = holderOf(ctx, js, sp, c.RunID, params)
			}
			return nil, r.refused(holder)
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			rec, err := store.DecodeEntry(ctx, e.Key(), e.Value(), e.Revision())
			if err != nil {
				return nil, fmt.Errorf("start of %s: %w", c.RunID, err)
			}
			if rec.HasRequest(c.RequestID) {
				return &Started{Record: rec}, nil
			}
			if rec.Params.Equal(params) { // made in between by another start of the same run
				return &Started{Record: rec, Again: true}, nil
			}
		}
	}
}

// current reads a watch's initial value: the run's record, or nil when it has none.
func current(ctx context.Context, store *kc.Store, w jetstream.KeyWatcher) (*kc.Record, error) {
	var rec *kc.Record
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-w.Updates():
			if e == nil {
				return rec, nil // the initial values are all delivered
			}
			rec = nil
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := store.DecodeEntry(ctx, e.Key(), e.Value(), e.Revision())
			if err != nil {
				return nil, err
			}
			rec = r
		}
	}
}

// startID is Start's request id: the run and a digest of its input, so that the same start
// sent twice is one start (and one message, within the stream's duplicate window), and a
// start of the run with other input is another, which the supervisor refuses.
func startID(runID string, params map[string]json.RawMessage) (string, error) {
	b, err := json.Marshal(params) // members sorted, values compacted
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "start-" + runID + "-" + hex.EncodeToString(sum[:6]), nil
}
