package service

import (
	"context"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
)

// outboxTrust is what the outbox sender checks each message's signature and queuer against:
// the registered keys, and the kinds each of the night's steps queues.
func (d *Deps) outboxTrust() *outbox.Trust {
	return &outbox.Trust{Ring: d.Ring, Kinds: night.Kinds()}
}

// notifyAs is notify for service name: its notices are signed by name's key.
func (d *Deps) notifyAs(name string) func(ctx context.Context, kind string, note runner.HandoverNote, generation int, token uint64) {
	return func(ctx context.Context, kind string, note runner.HandoverNote, generation int, token uint64) {
		d.notify(ctx, name, kind, note, generation, token)
	}
}
