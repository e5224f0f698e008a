package runner

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/lease"
)

// maxConcurrency is the step consumers' MaxAckPending: more messages in hand than that
// would never be delivered.
const maxConcurrency = 1000

// runGates lets one message of a run at a time through a runner. Different runs pass at
// once; a second message of a run in hand (a duplicate event) waits for the first to be
// settled, keeping its own message alive meanwhile.
type runGates struct {
	mu    sync.Mutex
	gates map[string]*runGate
}

type runGate struct {
	turn    chan struct{} // holds a token while a message of the run is in hand
	waiters int           // messages holding or waiting for the gate
}

// enter waits for the run's turn and returns the function that ends it. While it waits it
// tells the server every heartbeat that m is still being worked on.
func (g *runGates) enter(runID string, m jetstream.Msg, heartbeat time.Duration) (leave func()) {
	g.mu.Lock()
	if g.gates == nil {
		g.gates = map[string]*runGate{}
	}
	gate := g.gates[runID]
	if gate == nil {
		gate = &runGate{turn: make(chan struct{}, 1)}
		g.gates[runID] = gate
	}
	gate.waiters++
	g.mu.Unlock()
	select {
	case gate.turn <- struct{}{}:
	default:
		stop := lease.Every(heartbeat, func() bool { _ = m.InProgress(); return true })
		gate.turn <- struct{}{}
		stop()
	}
	return func() {
		<-gate.turn
		g.mu.Lock()
		if gate.waiters--; gate.waiters == 0 {
			delete(g.gates, runID)
		}
		g.mu.Unlock()
	}
}
