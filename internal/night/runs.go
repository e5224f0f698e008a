package night

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// OpenRuns opens the checkpoint bucket as the night's services read it, for the tools that
// watch or show its records (the CLI, chaos, the bench): every read checks the record's sum,
// its invariants with the night's pipeline, its epoch and its signature against the keys
// cairn init registered, so a tool never follows a record no service would act on.
// DecodeEntry is the same check for a watcher's entries.
func OpenRuns(ctx context.Context, js jetstream.JetStream, opts ...kc.Option) (*kc.Store, error) {
	ring, err := identity.OpenRing(ctx, js, assets.Default)
	if err != nil {
		return nil, err
	}
	return kc.Open(ctx, js, assets.BucketRuns, append([]kc.Option{kc.WithRing(ring), kc.WithPipeline(Pipeline.Names())}, opts...)...)
}
