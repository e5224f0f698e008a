package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/consume"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/retry"
)

// Log attribute keys.
const (
	attrRunID  = "run_id"
	attrKey    = "key"
	attrStep   = "step"
	attrMark   = "mark"
	attrReason = "reason"
	attrError  = "error"
	attrDelay  = "delay"
)

// maxMarkRaces bounds how often one turn follows a mark another writer moved.
const maxMarkRaces = 3

// settleTimeout bounds an ack, so a stop or a slow server cannot hold a turn forever.
const settleTimeout = 5 * time.Second

// Sender delivers the messages queued on CAIRN_OUTBOX, at most once each but for
// the one allowed repeat (see the package documentation).
type Sender struct {
	c SenderConfig

	mu sync.Mutex
	kv jetstream.KeyValue // looked up on first use

	deliveries atomic.Int64 // deliveries begun by this sender: the n of its fault points

	// inHand holds the keys of the messages this sender's turns are working on. Two copies
	// of one message (a resume's requeued copy beside the original still being retried) in
	// two turns at once would each take the other's sending mark for a dead sender's and
	// both deliver: the second copy waits for the first turn instead.
	handMu sync.Mutex
	inHand map[string]struct{}
}

// take claims m's key for this turn; false when another turn of this sender has it.
func (s *Sender) take(m Message) bool {
	k := MarkKey(m.RunID, m.Key)
	s.handMu.Lock()
	defer s.handMu.Unlock()
	if _, busy := s.inHand[k]; busy {
		return false
	}
	if s.inHand == nil {
		s.inHand = make(map[string]struct{})
	}
	s.inHand[k] = struct{}{}
	return true
}

func (s *Sender) drop(m Message) {
	s.handMu.Lock()
	defer s.handMu.Unlock()
	delete(s.inHand, MarkKey(m.RunID, m.Key))
}

// NewSender checks c, fills its defaults and returns a Sender.
func NewSender(c SenderConfig) (*Sender, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Sender{c: c}, nil
}

// outcome is how a turn ended without an error.
type outcome int

const (
	delivered    outcome = iota // handed over now
	found                       // a sending mark whose delivery had landed: marked sent
	alreadySent                 // a sent mark: skipped
	wasCancelled                // a cancelled mark: never sent
	dropped                     // Admit refused it
)

func (o outcome) String() string {
	return [...]string{"delivered", "found delivered", "already sent", "cancelled", "dropped"}[o]
}

// Handle processes one message and settles it: Ack when it is sent, was sent,
// is cancelled or is dropped; NakWithDelay on a temporary error, for as long as the
// error lasts; TermWithReason when it cannot be decoded, or when the outside system
// refused it for good and its mark says so (refused). It returns nil when the message
// was acked, else the error that decided otherwise.
func (s *Sender) Handle(ctx context.Context, msg jetstream.Msg) (err error) {
	// A panic is a message refused for good (its finishing run handed over), or, before the
	// message decoded, a rejection; consume.Recover terms it.
	var m Message
	decoded := false
	defer consume.Recover(s.c.Logger, msg, func(perr error) {
		err = perr
		if !decoded {
			if s.c.Rejected != nil {
				s.c.Rejected(context.WithoutCancel(ctx), msg, perr)
			}
			return
		}
		if s.c.Refused != nil {
			s.c.Refused(context.WithoutCancel(ctx), m, perr)
		}
	})
	ctx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()

	if m, err = decode(s.c.Space, msg); err != nil {
		return s.reject(ctx, msg, err)
	}
	if err := s.c.Trust.check(ctx, msg, m); errors.Is(err, ErrForged) {
		return s.reject(ctx, msg, err) // before any mark: a forgery of a real key moves none
	} else if err != nil {
		delay := backoff(msg, s.c.MaxBackoff)
		s.c.Logger.Warn("outbox message will be retried", slog.String(attrKey, m.Key), slog.String(attrError, err.Error()), slog.Duration(attrDelay, delay))
		_ = msg.NakWithDelay(delay)
		return err
	}
	decoded = true
	log := s.c.Logger.With(slog.String(attrRunID, m.RunID), slog.String(attrKey, m.Key), slog.String(attrStep, m.Step))

	kv, err := s.bucket(ctx)
	if err == nil && !s.take(m) {
		err = fmt.Errorf("delivering %q: another turn of this sender has it: %w", m.Key, errBusy)
	} else if err == nil {
		defer s.drop(m)
		var out outcome
		var reason string
		out, reason, err = s.process(ctx, kv, msg, m)
		if err == nil {
			return s.ack(ctx, msg, m, out, reason, log)
		}
	}
	if errors.Is(err, errRefused) {
		log.Error("outbox message refused for good", slog.String(attrError, err.Error()))
		if s.c.Refused != nil {
			s.c.Refused(ctx, m, err)
		}
		s.marked(ctx, m.RunID)
		_ = msg.TermWithReason(truncate(err.Error(), 256))
		return err
	}
	delay := backoff(msg, s.c.MaxBackoff)
	log.Warn("outbox message will be retried", slog.String(attrError, err.Error()), slog.Duration(attrDelay, delay))
	_ = msg.NakWithDelay(delay)
	return err
}

// process walks the mark rules of DESIGN.md ("Mail, the outbox ...") for m.
func (s *Sender) process(ctx context.Context, kv jetstream.KeyValue, msg jetstream.Msg, m Message) (outcome, string, error) {
	// raced is set once another writer moved the mark under us: from then on a
	// sending mark is a live sender's, not a dead one's.
	raced := false
	for range maxMarkRaces {
		mark, rev, err := readMark(ctx, kv, m.RunID, m.Key)
		if err != nil {
			return 0, "", err
		}
		switch mark {
		case Sent:
			return alreadySent, "", nil
		case Cancelled:
			return wasCancelled, "", nil
		case Sending, Refused:
			if raced && mark == Sending {
				return 0, "", fmt.Errorf("delivering %q: %w", m.Key, errBusy)
			}
			// The sender that wrote a sending mark died (or was too slow): the message may
			// have gone. A refused one did not go; this copy tries again.
			went, err := s.c.Transport.Delivered(ctx, m)
			if err != nil {
				return 0, "", err
			}
			if went {
				return found, "", s.finish(ctx, kv, m, rev)
			}
		}
		if ok, reason, err := s.admit(ctx, m); err != nil || !ok {
			return dropped, reason, err
		}
		var won bool
		if mark == "" {
			rev, won, err = claimMark(ctx, kv, m.RunID, m.Key, Sending)
		} else {
			// Re-claim the stale mark, so that of two senders finding it only one repeats the call.
			rev, won, err = moveMark(ctx, kv, m.RunID, m.Key, Sending, rev)
		}
		if err != nil {
			return 0, "", err
		}
		if !won {
			raced = true
			continue
		}
		if err := s.c.Allow.Check(m); err != nil {
			return 0, "", s.refuse(ctx, kv, m, rev, err)
		}
		s.marked(ctx, m.RunID)
		// Tell the server this turn is alive before the one call that may take long.
		_ = msg.InProgress()
		if err := s.deliver(ctx, m); err != nil {
			if permanent(err) {
				return 0, "", s.refuse(ctx, kv, m, rev, err)
			}
			return 0, "", err
		}
		return delivered, "", s.finish(ctx, kv, m, rev)
	}
	return 0, "", fmt.Errorf("delivering %q: mark moved %d times: %w", m.Key, maxMarkRaces, errBusy)
}

// deliver hands m to the transport, between the sender's two fault points.
func (s *Sender) deliver(ctx context.Context, m Message) error {
	n := int(s.deliveries.Add(1))
	if err := s.c.Faults.Hit(ctx, FaultStep, faults.BeforeDeliver, n); err != nil {
		return fmt.Errorf("delivering %q: %w", m.Key, err)
	}
	if err := s.c.Transport.Deliver(ctx, m, Render(m)); err != nil {
		return err
	}
	// A crash here is the one allowed repeat: handed over, not yet marked sent.
	if err := s.c.Faults.Hit(ctx, FaultStep, faults.AfterDeliver, n); err != nil {
		return fmt.Errorf("after delivering %q: %w", m.Key, err)
	}
	return nil
}

// permanent: the outside system refused the message for good, so trying it again
// cannot help.
func permanent(err error) bool {
	return errors.Is(err, ErrPermanent) || errors.Is(err, ErrInvalid) || errors.Is(err, faults.ErrPermanent)
}

// refuse moves the mark from sending (at rev) to refused: the message did not go, and the
// run waits for a person. When the mark cannot be written the message is retried (its
// sending mark then stands for a delivery that did not happen, and is claimed again).
func (s *Sender) refuse(ctx context.Context, kv jetstream.KeyValue, m Message, rev uint64, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	_, ok, err := moveMark(ctx, kv, m.RunID, m.Key, Refused, rev)
	if err != nil {
		return errors.Join(cause, err)
	}
	if !ok {
		return fmt.Errorf("marking %q refused: %w", m.Key, errors.Join(cause, errBusy))
	}
	return fmt.Errorf("%w: %w", errRefused, cause)
}

func (s *Sender) admit(ctx context.Context, m Message) (bool, string, error) {
	if s.c.Admit == nil || m.Notice() {
		return true, "", nil
	}
	ok, reason, err := s.c.Admit(ctx, m)
	if err != nil {
		return false, "", fmt.Errorf("admitting %q: %w", m.Key, err)
	}
	return ok, reason, nil
}

// finish moves the mark from sending (at rev) to sent. The delivery has happened,
// so a failed write is retried a few times here: each failure left standing costs
// an SMTP message its one repeat. It gets its own deadline: a delivery that used up
// the turn's time must still be recorded.
func (s *Sender) finish(ctx context.Context, kv jetstream.KeyValue, m Message, rev uint64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	p := retry.Policy{First: minBackoff, Factor: 2, Jitter: 0.1, Tries: 3}
	err := p.Do(ctx, func(error) bool { return true }, func(int) error {
		_, ok, err := moveMark(ctx, kv, m.RunID, m.Key, Sent, rev)
		switch {
		case err != nil:
			return err
		case ok:
			s.marked(ctx, m.RunID)
			return nil
		}
		// Another sender moved the mark: it finished the message, or it re-claimed it and
		// will finish it. Either way this delivery is done.
		mark, _, err := readMark(ctx, kv, m.RunID, m.Key)
		if err == nil && mark != Sent {
			s.c.Logger.Warn("outbox mark moved while delivering", slog.String(attrKey, m.Key), slog.String(attrMark, string(mark)))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("marking outbox message %q sent: %w", m.Key, err)
	}
	return nil
}

func (s *Sender) marked(ctx context.Context, runID string) {
	if s.c.Marked != nil {
		s.c.Marked(ctx, runID)
	}
}

// ack acknowledges a message whose turn is over and reports the outcome.
func (s *Sender) ack(ctx context.Context, msg jetstream.Msg, m Message, out outcome, reason string, log *slog.Logger) error {
	switch out {
	case dropped:
		log.Warn("outbox message dropped", slog.String(attrReason, reason))
		if s.c.Dropped != nil {
			s.c.Dropped(ctx, m, reason)
		}
	case delivered, found:
		log.Info("outbox message sent", slog.String("how", out.String()))
	default:
		log.Debug("outbox message skipped", slog.String("how", out.String()))
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		return fmt.Errorf("acking outbox message %q: %w", m.Key, err)
	}
	return nil
}

// reject records an undecodable or forged message and terminates it: retrying cannot help.
func (s *Sender) reject(ctx context.Context, msg jetstream.Msg, err error) error {
	s.c.Logger.Error("outbox message rejected", slog.String("subject", msg.Subject()), slog.String(attrError, err.Error()))
	if s.c.Rejected != nil {
		s.c.Rejected(ctx, msg, err)
	}
	_ = msg.TermWithReason(truncate(err.Error(), 256))
	return err
}

// bucket looks cairn-outbox-sent up once.
func (s *Sender) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := s.c.JS.KeyValue(ctx, s.c.Bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up bucket %q: %w", s.c.Bucket, err)
	}
	s.kv = kv
	return kv, nil
}

// decode turns a stream message back into the Message that Queue published in space sp.
func decode(sp assets.Space, msg jetstream.Msg) (Message, error) {
	e, err := events.Decode(&nats.Msg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()})
	if err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if e.Type != events.TypeOutbox {
		return Message{}, fmt.Errorf("%w: type %q on %q is not %s", ErrInvalid, e.Type, msg.Subject(), events.TypeOutbox)
	}
	var m Message
	if err := e.Unmarshal(&m); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := m.validate(); err != nil {
		return Message{}, err
	}
	if e.ID != EventID(m) || e.Subject != m.RunID {
		return Message{}, fmt.Errorf("%w: event %q of run %q carries message %q of run %q", ErrInvalid, e.ID, e.Subject, m.Key, m.RunID)
	}
	if want := sp.Outbox(m.RunID, m.Kind); msg.Subject() != want {
		return Message{}, fmt.Errorf("%w: message %q arrived on %q, not %q", ErrInvalid, m.Key, msg.Subject(), want)
	}
	return m, nil
}

// minBackoff is the first wait of a message that failed for now.
const minBackoff = 100 * time.Millisecond

// RetryPolicy is the wait before a message that failed for now is tried again: from 100ms,
// doubling by delivery, at most hi ([SenderConfig].MaxBackoff, CAIRN_OUTBOX_BACKOFF), each
// ±10% so that messages that failed together do not come back together.
func RetryPolicy(hi time.Duration) retry.Policy {
	return retry.Policy{First: minBackoff, Factor: 2, Max: hi, Jitter: 0.1}
}

// backoff is the NakWithDelay of a message that failed for now, capped at hi.
func backoff(msg jetstream.Msg, hi time.Duration) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	return backoffFor(n, hi)
}

// backoffFor is RetryPolicy(hi)'s wait after the delivery count n (1 on the first delivery).
func backoffFor(n uint64, hi time.Duration) time.Duration {
	return RetryPolicy(hi).Delay(int(min(max(n, 1), 64)) - 1) // 100 ms << 63 is past any cap
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
