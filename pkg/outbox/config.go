package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of the framework's outbox assets (DESIGN.md, "NATS resources").
const (
	DefaultStream   = "CAIRN_OUTBOX"
	DefaultConsumer = "outbox-sender"
	DefaultBucket   = "cairn-outbox-sent"
)

// DefaultHandleTimeout bounds the handling of one message when SenderConfig.Timeout
// is zero: below the consumer's 30 s ack wait, so the message is not redelivered to
// another sender while this one still works on it.
const DefaultHandleTimeout = 20 * time.Second

// SenderConfig is what a Sender needs. JS, Transport and Logger are required.
type SenderConfig struct {
	JS        jetstream.JetStream
	Transport Transport
	Logger    *slog.Logger
	Stream    string        // default "CAIRN_OUTBOX"
	Consumer  string        // default "outbox-sender"
	Bucket    string        // default "cairn-outbox-sent"
	Timeout   time.Duration // one message, delivery included; default DefaultHandleTimeout

	// Admit decides whether a message may still be sent (the run's generation and
	// token rules of DESIGN.md). False with a reason: the message is dropped (acked,
	// no mark written) and Dropped is called. An error retries the message later.
	// nil admits everything.
	Admit func(ctx context.Context, m Message) (ok bool, reason string, err error)
	// Marked is called after every mark the sender writes, so the caller can move a
	// finishing run to done. May be nil.
	Marked func(ctx context.Context, runID string)
	// Dropped is called for a message that will not be sent: Admit refused it, or the
	// outside system refused it for good. May be nil.
	Dropped func(ctx context.Context, m Message, reason string)
	// Rejected is called for an undecodable message before it is Term'ed, so the
	// caller can record it on cairn.rejected. May be nil.
	Rejected func(ctx context.Context, msg jetstream.Msg, reason error)
}

func (c SenderConfig) withDefaults() SenderConfig {
	c.Stream = cmp.Or(c.Stream, DefaultStream)
	c.Consumer = cmp.Or(c.Consumer, DefaultConsumer)
	c.Bucket = cmp.Or(c.Bucket, DefaultBucket)
	c.Timeout = cmp.Or(c.Timeout, DefaultHandleTimeout)
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
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout %s is negative", c.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}
