package runner

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/retrypolicy"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/saga"
)

// Attempt is one try at a step, handed to Step.Run. It carries the fencing token and gives
// access to the earlier steps' outputs.
type Attempt struct {
	RunID      string
	Step       string
	Params     kvcheckpoint.Params
	Generation int
	Token      fence.Token // the lease token (the revision read, for lease-free steps)
	Restart    bool        // the previous attempt of this step died

	rec      *kvcheckpoint.Record
	r        *Runner
	batch    *audit.Batch
	log      *slog.Logger // carries run_id, step and token
	began    time.Time
	hbPaused atomic.Bool
	drift    driftState

	mu    sync.Mutex
	reads []inputRead // what the attempt read, for its input fingerprint
	tally *saga.Tally // the step's saga records, once read (nil: not read, or no longer exact)
	// tallyFailed: reading them failed once; the commit counts them with a read of its own
	tallyFailed bool

	memoMu   sync.Mutex
	memoKeys map[string]*memoKey // Memo's keys of this attempt

	extras  extras // what the step told of its result besides the output (Park, Count, ...)
	typedIn []byte // a typed step's input as read, once an attempt (readIn)

	progress *Progress              // what the loop guard counted, for the handover note
	guarded  *kvcheckpoint.Progress // the loop guard's count, stored with a handover
}

// Record returns the checkpoint as it was when the attempt began.
func (a *Attempt) Record() *kvcheckpoint.Record { return a.rec.Clone() }

// Input loads the output of an earlier step, checking its digest. The read goes into the
// step's input fingerprint.
func (a *Attempt) Input(ctx context.Context, step string) ([]byte, error) {
	o, err := a.InputRef(step)
	if err != nil {
		return nil, err
	}
	return a.r.cfg.Artifacts.Load(ctx, o)
}

// InputRef is the pointer to an earlier step's verified output, for a step that reads it
// itself (streaming it from the artifact store); the read goes into the step's input
// fingerprint as Input's does.
func (a *Attempt) InputRef(step string) (*kvcheckpoint.Output, error) {
	s, ok := a.rec.Steps[step]
	if !ok || s.Status != kvcheckpoint.Verified || s.Output == nil {
		return nil, fmt.Errorf("step %q has no verified output in run %q", step, a.RunID)
	}
	a.read(step, s.Output.Digest)
	return s.Output, nil
}

// Snapshot loads the run's saved snapshot (the record's snapshot), read as an input named
// "snapshot".
func (a *Attempt) Snapshot(ctx context.Context) ([]byte, error) {
	if a.rec.Snapshot == nil {
		return nil, fmt.Errorf("run %q has no snapshot", a.RunID)
	}
	a.read(snapshotInput, a.rec.Snapshot.Digest)
	return a.r.cfg.Artifacts.Load(ctx, a.rec.Snapshot)
}

// Intents are the first intents the step's attempts recorded on CAIRN_SAGA, by key
// (saga.ReadIntents), read once an attempt: a restart compares its writes with them.
func (a *Attempt) Intents(ctx context.Context) (saga.Intents, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.readTally(ctx); err != nil {
		return nil, err
	}
	return maps.Clone(a.tally.First), nil
}

// RecordEffect stores r, the intent or the outcome of one of the step's outside writes, on
// CAIRN_SAGA (saga.Publish) and counts it: the step's effects.intents_open, in its commit and
// in a failure, is how many of its keys of this generation have an intent and no outcome,
// earlier attempts' included. The step's records are read once, at its first.
func (a *Attempt) RecordEffect(ctx context.Context, r saga.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// The tally is a count for people (effects.intents_open): a read of the earlier records
	// that fails leaves it to the commit's own read, and never fails the write.
	if !a.tallyFailed {
		if err := a.readTally(ctx); err != nil {
			a.tallyFailed = true
			a.log.Warn("intents_open left to the commit: reading the step's saga records", slog.Any("error", err))
		}
	}
	if err := saga.Publish(ctx, a.r.cfg.JS, "/cairn/"+a.Step, a.r.cfg.Now(), r, saga.SignedBy(a.r.cfg.Store.Signer()), saga.In(a.r.cfg.Space)); err != nil {
		a.tally = nil // it may be stored all the same: a failure reads the records again
		return err
	}
	if a.tally != nil {
		a.tally.Add(r)
	}
	return nil
}

// Signer is who the step signs what it writes as: its records, its saga records, the
// messages it queues (nil: unsigned).
func (a *Attempt) Signer() *identity.Signer { return a.r.cfg.Store.Signer() }

// Ring is what the step checks what it reads against (nil: nothing).
func (a *Attempt) Ring() *identity.Ring { return a.r.cfg.Store.Ring() }

// Audit records an event about one item (a document, a key) on the timeline, asynchronously;
// it is stored before the step's message is acknowledged. try is the in-process retry number.
func (a *Attempt) Audit(event, item string, try int, attrs map[string]string) {
	id := events.AuditItemID(a.RunID, a.Step, event, a.Token.Value, item, try)
	a.batch.Record(id, events.Audit{RunID: a.RunID, Step: a.Step, Event: event, Token: a.Token.Value, Item: item, Owner: a.r.owner.Name, Attrs: attrs})
}

// AuditNow records an item event and waits until it is stored: for events that must
// survive a crash right after them, such as a paid call about to be made.
func (a *Attempt) AuditNow(ctx context.Context, event, item string, try int, attrs map[string]string) error {
	id := events.AuditItemID(a.RunID, a.Step, event, a.Token.Value, item, try)
	return a.r.audit.Record(ctx, id, events.Audit{RunID: a.RunID, Step: a.Step, Event: event, Token: a.Token.Value, Item: item, Owner: a.r.owner.Name, Attrs: attrs})
}

// Fault fires the injected faults for point and write n (see package faults). A stall
// suspends the attempt's heartbeat, as a stopped process would.
func (a *Attempt) Fault(ctx context.Context, point string, n int) error {
	f := a.r.cfg.Faults
	if f.Empty() {
		return nil
	}
	if f.Stalls(a.Step, point, n) {
		a.hbPaused.Store(true)
		defer a.hbPaused.Store(false)
	}
	return f.Hit(ctx, a.Step, point, n)
}

// Retry calls fn until it succeeds, fails other than temporarily, or has been tried the
// configured number of times (Config.RetryAttempts), waiting 100ms, 200ms, 400ms ... (at
// most 5s), each ±10%. fn gets the try number, from 0.
func (a *Attempt) Retry(ctx context.Context, fn func(try int) error) error {
	p := retrypolicy.Item(a.r.cfg.RetryAttempts)
	return p.Do(ctx, func(err error) bool {
		if classify(err) != classTemporary {
			return false
		}
		a.r.m.Retries.WithLabelValues(a.Step, "item").Inc()
		return true
	}, fn)
}

// Now is the runner's clock.
func (a *Attempt) Now() time.Time { return a.r.cfg.Now() }

// Logger carries the run, step and token.
func (a *Attempt) Logger() *slog.Logger {
	return a.log
}

// JS is the JetStream handle.
func (a *Attempt) JS() jetstream.JetStream { return a.r.cfg.JS }
