package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
)

// Names of the framework's outbox assets in the default space (DESIGN.md, "NATS
// resources"); a hosted pipeline's are its space's (SenderConfig.Space).
const (
	DefaultStream   = "CAIRN_OUTBOX"
	DefaultConsumer = "outbox-sender"
	DefaultBucket   = "cairn-outbox-sent"
)

// DefaultHandleTimeout bounds the handling of one message when SenderConfig.Timeout
// is zero: below the consumer's 30 s ack wait, so the message is not redelivered to
// another sender while this one still works on it.
const DefaultHandleTimeout = 20 * time.Second

// DefaultMaxBackoff caps the wait before a message that failed for now is tried again, when
// SenderConfig.MaxBackoff is zero. A temporary failure is retried for as long as it lasts:
// no delivery limit ever abandons a message.
const DefaultMaxBackoff = 5 * time.Second

// DefaultWorkers is how many messages a sender works on at once when SenderConfig.Workers
// is zero, so that one message that cannot be delivered (a webhook that hangs until its
// timeout) never holds up the others.
const DefaultWorkers = 4

// FaultStep names the sender in CAIRN_FAULTS rules: outbox-sender.before-deliver.<n> and
// outbox-sender.after-deliver.<n> (n the 1-based delivery of this sender, in the order its
// deliveries begin).
const FaultStep = "outbox-sender"

// SenderConfig is what a Sender needs. JS, Transport and Logger are required.
type SenderConfig struct {
	JS        jetstream.JetStream
	Transport Transport
	Logger    *slog.Logger
	// Space is whose outbox the sender consumes: the zero Space is the reference night's
	// (CAIRN_OUTBOX, cairn-outbox-sent); a hosted pipeline's is its own
	// (CAIRN_<NAME>_OUTBOX, cairn-<name>-outbox-sent), whose messages Queue puts there with In.
	Space    assets.Space
	Stream   string        // default the space's outbox stream: "CAIRN_OUTBOX" in the default space
	Consumer string        // default "outbox-sender", a durable on Stream
	Bucket   string        // default the space's marks bucket: "cairn-outbox-sent" in the default space
	Timeout  time.Duration // one message, delivery included; default DefaultHandleTimeout
	// MaxBackoff caps the wait between two tries of a message that failed for now (the
	// waits grow from 100 ms by doubling, ±10%: RetryPolicy); default DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Workers is how many messages are worked on at once; default DefaultWorkers.
	Workers int
	// Faults injects crashes around deliveries (FaultStep); nil injects nothing.
	Faults *faults.Set
	// Allow is whom the sender may send as and to; required. A message it refuses is
	// marked refused (Refused is called) and never handed to the transport.
	Allow Allow

	// Admit decides whether a message may still be sent (the run's generation and
	// token rules of DESIGN.md; RecordAdmission reads them from the checkpoints). False
	// with a reason: the message is dropped (acked, no mark written) and Dropped is
	// called. An error retries the message later. A notice (Message.Notice) is never
	// asked about: it goes out whatever the state of its run's record. nil admits
	// everything.
	Admit func(ctx context.Context, m Message) (ok bool, reason string, err error)
	// Marked is called after every mark the sender writes, so the caller can move a
	// finishing run to done. May be nil.
	Marked func(ctx context.Context, runID string)
	// Dropped is called for a message that will not be sent: Admit refused it. May be nil.
	Dropped func(ctx context.Context, m Message, reason string)
	// Refused is called for a message the outside system refused for good (ErrPermanent),
	// after its mark moved to refused and before it is terminated, so the caller can
	// record the error for the person who takes the run over. May be nil.
	Refused func(ctx context.Context, m Message, err error)
	// Trust checks who queued each message (trust.go); a message it refuses is rejected
	// (Rejected is called) and terminated, before any mark. nil checks nothing.
	Trust *Trust
	// Rejected is called for an undecodable or forged message before it is Term'ed, so
	// the caller can record it on cairn.rejected. May be nil.
	Rejected func(ctx context.Context, msg jetstream.Msg, reason error)
}

func (c SenderConfig) withDefaults() SenderConfig {
	c.Stream = cmp.Or(c.Stream, c.Space.Stream(assets.StreamOutbox))
	c.Consumer = cmp.Or(c.Consumer, assets.ConsumerOutbox)
	c.Bucket = cmp.Or(c.Bucket, c.Space.Bucket(assets.BucketOutbox))
	c.Timeout = cmp.Or(c.Timeout, DefaultHandleTimeout)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, DefaultMaxBackoff)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	return c
}

// validate returns one sentence per broken rule.
func (c SenderConfig) validate() error {
	var errs []error
	if c.JS == nil {
		errs = append(errs, errors.New("JS is required: the sender consumes CAIRN_OUTBOX and writes cairn-outbox-sent"))
	}
	if c.Transport == nil {
		errs = append(errs, errors.New("Transport is required: a FileTransport or an SMTPTransport"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("Logger is required"))
	}
	if err := c.Allow.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout %s is negative", c.Timeout))
	}
	if c.MaxBackoff < minBackoff {
		errs = append(errs, fmt.Errorf("MaxBackoff %s is below the first wait of %s", c.MaxBackoff, minBackoff))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("Workers %d is below 1", c.Workers))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}
