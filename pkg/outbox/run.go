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
// message in hand when ctx ends is finished (each turn is bounded by the
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
	return consume.Run(ctx, cons, func(msg jetstream.Msg) {
		if !g.enter() {
			// Stopping: hand the message back for another sender.
			_ = msg.NakWithDelay(backoff(msg))
			return
		}
		defer g.leave()
		// Handle settles the message and logs its outcome.
		_ = s.Handle(turnCtx, msg)
	},
		// Mail is a trickle: one message in hand at a time means a stop strands none.
		consume.Pull(jetstream.PullMaxMessages(1)),
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
