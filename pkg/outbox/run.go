package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/consume"
)

// stopTimeout bounds the wait for the consumer to close after a stop.
const stopTimeout = 5 * time.Second

// Run consumes the outbox until ctx ends and returns nil on a clean stop, or an error
// wrapping consume.ErrEnded when the loop ends by itself (the durable deleted). The
// messages in hand when ctx ends are finished (each turn is bounded by the
// config's Timeout), so a stop does not leave a mark at sending for nothing.
func (s *Sender) Run(ctx context.Context) error {
	cons, err := s.c.JS.Consumer(ctx, s.c.Stream, s.c.Consumer)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return fmt.Errorf("looking up consumer %q on stream %q: %w", s.c.Consumer, s.c.Stream, err)
	}
	if _, err := s.bucket(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	turnCtx := context.WithoutCancel(ctx)
	var g gate
	defer g.close()
	defer context.AfterFunc(ctx, g.shut)() // no new turn once stopping
	// Up to Workers messages are in hand at once, each in a turn of its own: a message
	// that cannot be delivered for now (a relay that hangs) holds up one worker, not the
	// others. The callback waits for a free worker, so no more than Workers are pulled.
	workers := make(chan struct{}, s.c.Workers)
	return consume.Run(ctx, cons, func(msg jetstream.Msg) {
		if !g.enter() {
			// Stopping: hand the message back for another sender.
			_ = msg.NakWithDelay(backoff(msg, s.c.MaxBackoff))
			return
		}
		workers <- struct{}{}
		if ctx.Err() != nil {
			<-workers
			g.leave()
			_ = msg.NakWithDelay(backoff(msg, s.c.MaxBackoff))
			return
		}
		go func() {
			defer func() { <-workers; g.leave() }()
			// Handle settles the message and logs its outcome.
			_ = s.Handle(turnCtx, msg)
		}()
	},
		consume.Pull(jetstream.PullMaxMessages(s.c.Workers)),
		consume.StopWithin(stopTimeout), consume.Logger(s.c.Logger),
	)
}

// gate lets Run wait for the turn in progress and refuse new ones once stopping.
type gate struct {
	mu     sync.Mutex
	closed bool
	busy   sync.WaitGroup
}

func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.busy.Add(1)
	return true
}

func (g *gate) leave() { g.busy.Done() }

// shut refuses new turns.
func (g *gate) shut() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// close refuses new turns and waits for the one in progress.
func (g *gate) close() {
	g.shut()
	g.busy.Wait()
}
