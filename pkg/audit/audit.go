package audit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
)

// Publisher publishes audit events for one service.
type Publisher struct {
	js     jetstream.JetStream
	source string
	now    func() time.Time
	space  assets.Space
}

// New returns a publisher whose events have source /cairn/<service>.
func New(js jetstream.JetStream, service string, now func() time.Time) *Publisher {
	if now == nil {
		now = time.Now
	}
	return &Publisher{js: js, source: "/cairn/" + service, now: now}
}

// In is p publishing in space sp (a pipeline's own timeline and refusals), not the default.
func (p *Publisher) In(sp assets.Space) *Publisher {
	q := *p
	q.space = sp
	return &q
}

// Batch collects the asynchronous publishes of one attempt.
type Batch struct {
	p       *Publisher
	mu      sync.Mutex
	futures []jetstream.PubAckFuture
	err     error
}

// Batch starts a batch.
func (p *Publisher) Batch() *Batch { return &Batch{p: p} }

func (p *Publisher) msg(id string, a events.Audit) (*nats.Msg, error) {
	e, err := events.New(id, events.TypeAudit, p.source, a.RunID, p.now(), a)
	if err != nil {
		return nil, fmt.Errorf("building audit event %q: %w", id, err)
	}
	return events.Encode(p.space.Audit(a.RunID), e)
}

// pruneAt is how many unsettled publishes a batch holds before it drops the settled ones: a
// step that records 100,000 document reads keeps only those still in flight, not every
// message it published.
const pruneAt = 1024

// Record publishes one audit event asynchronously; id is its Nats-Msg-Id.
func (b *Batch) Record(id string, a events.Audit) {
	f, err := b.p.Post(id, a)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.futures = append(b.futures, f)
		if len(b.futures) >= pruneAt && len(b.futures)%(pruneAt/2) == 0 {
			b.prune()
		}
	} else if b.err == nil {
		b.err = err
	}
}

// prune drops the publishes already stored, keeping the first failure; b.mu is held.
func (b *Batch) prune() {
	kept := b.futures[:0]
	for _, f := range b.futures {
		select {
		case <-f.Ok():
			continue
		case err := <-f.Err():
			if b.err == nil {
				b.err = fmt.Errorf("storing audit event %q: %w", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
			}
			continue
		default:
		}
		kept = append(kept, f)
	}
	clear(b.futures[len(kept):])
	b.futures = kept
}

// Wait waits for every event recorded so far to be stored.
func (b *Batch) Wait(ctx context.Context) error {
	b.mu.Lock()
	futures, err := b.futures, b.err
	b.futures, b.err = nil, nil
	b.mu.Unlock()
	if err != nil {
		return err
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("storing audit event %q: %w", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Post publishes one audit event asynchronously and returns its ack without waiting for it:
// for bookkeeping events that the caller may settle its work without (a step's commit,
// which its checkpoint records too), whose loss in a crash costs a timeline line. Events
// that count something across crashes (a paid call, a document read) go in a Batch, or
// through Record.
func (p *Publisher) Post(id string, a events.Audit) (jetstream.PubAckFuture, error) {
	m, err := p.msg(id, a)
	if err != nil {
		return nil, err
	}
	f, err := p.js.PublishMsgAsync(m)
	if err != nil {
		return nil, fmt.Errorf("publishing audit event %q: %w", id, err)
	}
	return f, nil
}

// Record publishes one audit event and waits for it to be stored.
func (p *Publisher) Record(ctx context.Context, id string, a events.Audit) error {
	m, err := p.msg(id, a)
	if err != nil {
		return err
	}
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing audit event %q: %w", id, err)
	}
	return nil
}

// Reject records a refused input on cairn.rejected with its reason; id is
// <stream>:<seq> of the refused message, or a fresh id for a refused core publish.
// runID names the run the input was about, or is empty when none could be read from it.
func (p *Publisher) Reject(ctx context.Context, id, runID string, r events.Rejected) error {
	if events.ValidID("run_id", runID) != nil {
		runID = "none" // ce-subject is required; the refused input named no usable run
	}
	e, err := events.New(id, events.TypeRejected, p.source, runID, p.now(), r)
	if err != nil {
		return fmt.Errorf("building rejection %q: %w", id, err)
	}
	m, err := events.Encode(p.space.Rejected(), e)
	if err != nil {
		return fmt.Errorf("encoding rejection %q: %w", id, err)
	}
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publishing rejection %q: %w", id, err)
	}
	return nil
}
