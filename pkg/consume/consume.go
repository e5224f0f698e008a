package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Option changes how [Run] consumes and stops.
type Option func(*options)

type options struct {
	pull       []jetstream.PullConsumeOpt
	drain      bool
	stopWithin time.Duration
	log        *slog.Logger
	ended      func(error)
}

// Pull passes options to jetstream's Consume (PullMaxMessages, PullExpiry, ...). Run sets
// the error handler itself.
func Pull(opts ...jetstream.PullConsumeOpt) Option {
	return func(o *options) { o.pull = append(o.pull, opts...) }
}

// Drain makes a clean stop drain the consumer, so the messages already buffered still reach
// the handler, instead of stopping it at once.
func Drain() Option { return func(o *options) { o.drain = true } }

// StopWithin bounds the wait for the consumer to close after a stop or a drain (default
// 5s); the handler in progress counts. After it the consumer is stopped hard and Run
// returns.
func StopWithin(d time.Duration) Option { return func(o *options) { o.stopWithin = d } }

// Logger logs the consumer's errors that do not end the loop (a missed heartbeat, a pull
// that met no responders while the server elects a leader).
func Logger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Ended is called once, at once, when the loop ends unexpectedly, with the error Run is
// about to return, before Run waits for the consumer to close.
func Ended(f func(error)) Option { return func(o *options) { o.ended = f } }

// infoTimeout bounds the question whether the consumer still exists.
const infoTimeout = 5 * time.Second

// Run hands every message of cons to handle until ctx ends, then stops (or drains) the
// consumer and waits for it to close, within the StopWithin bound. It returns nil on that
// clean stop, and an error wrapping [ErrEnded] and the cause, naming the consumer and its
// stream, when the loop ends for any other reason.
func Run(ctx context.Context, cons jetstream.Consumer, handle jetstream.MessageHandler, opts ...Option) error {
	o := options{stopWithin: 5 * time.Second, log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	var name, stream string
	if info := cons.CachedInfo(); info != nil {
		name, stream = info.Name, info.Stream
	}
	log := o.log.With(slog.String("consumer", name), slog.String("stream", stream))

	var (
		mu    sync.Mutex
		cause error // the terminal error nats.go reported before it stopped the consumer
	)
	check := make(chan error, 1) // a sign that the consumer may be gone: ask the server
	onErr := func(_ jetstream.ConsumeContext, err error) {
		switch {
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest),
			errors.Is(err, jetstream.ErrConnectionClosed):
			// nats.go stops the consumer after these.
			mu.Lock()
			cause = cmpErr(cause, err)
			mu.Unlock()
			return
		case errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, nats.ErrNoResponders),
			errors.Is(err, jetstream.ErrConsumerNotFound):
			select {
			case check <- err:
			default:
			}
		}
		if ctx.Err() == nil {
			log.Warn("consumer", slog.String("error", err.Error()))
		}
	}
	cc, err := cons.Consume(handle, append(slices.Clone(o.pull), jetstream.ConsumeErrHandler(onErr))...)
	if err != nil {
		return fmt.Errorf("consuming %q on stream %q: %w", name, stream, err)
	}
	closed := cc.Closed()
	ended := func(why error) error {
		err := fmt.Errorf("consumer %q on stream %q: %w: %w", name, stream, ErrEnded, why)
		if o.ended != nil {
			o.ended(err)
		}
		cc.Stop()
		waitClosed(closed, o.stopWithin, log)
		return err
	}
	for {
		select {
		case <-ctx.Done():
			if o.drain {
				cc.Drain()
			} else {
				cc.Stop()
			}
			if !waitClosed(closed, o.stopWithin, log) {
				cc.Stop()
			}
			return nil
		case <-closed:
			if ctx.Err() != nil {
				return nil // stopping anyway
			}
			mu.Lock()
			why := cmpErr(cause, errClosed)
			mu.Unlock()
			return ended(why)
		case sign := <-check:
			qctx, cancel := context.WithTimeout(ctx, infoTimeout)
			_, err := cons.Info(qctx)
			cancel()
			if errors.Is(err, jetstream.ErrConsumerNotFound) && ctx.Err() == nil {
				return ended(fmt.Errorf("%w (after %w)", err, sign))
			}
		}
	}
}

// waitClosed waits up to within for closed; it says whether it closed.
func waitClosed(closed <-chan struct{}, within time.Duration, log *slog.Logger) bool {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-closed:
		return true
	case <-t.C:
		log.Warn("the consumer did not close in time", slog.Duration("waited", within))
		return false
	}
}

// cmpErr is the first non-nil error.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
