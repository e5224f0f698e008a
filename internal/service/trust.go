package service

import (
	"context"
	"log/slog"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
)

// outboxTrust is what the outbox sender checks each message's signature and queuer against:
// the registered keys, and the kinds each of the night's steps queues.
func (d *Deps) outboxTrust() *outbox.Trust {
	return &outbox.Trust{Ring: d.Ring, Kinds: night.Kinds()}
}

// notifyAs is the Notify of service name: the night's notices (CAIRN_NOTIFY_*), signed by
// name's key; nil without them.
func (d *Deps) notifyAs(name string) func(ctx context.Context, kind string, note runner.HandoverNote, generation int, token uint64) {
	n := d.Config.notices()
	return n.Notifier(d.JS, assets.Default, d.signers[name], n.From, d.Now, d.Logger.With(slog.String("service", name)))
}
