package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/night"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// openRuns opens the checkpoint bucket as the services read it: every record the CLI reads
// or follows is checked as theirs are (its sum, the record's invariants with the night's
// pipeline, its epoch, its signature against the registered keys), so the CLI never
// follows or shows as sound a record no service would act on.
func openRuns(ctx context.Context, js jetstream.JetStream) (*kc.Store, error) {
	return night.OpenRuns(ctx, js)
}

// decodeEntry decodes a watched entry of the bucket through store's checks; a record that
// fails them is a damaged error (exit 3) naming the run, its revision and why.
func decodeEntry(ctx context.Context, store *kc.Store, e jetstream.KeyValueEntry) (*kc.Record, error) {
	r, err := store.DecodeEntry(ctx, e.Key(), e.Value(), e.Revision())
	if err != nil {
		return nil, damaged(e.Key(), e.Revision(), err)
	}
	return r, nil
}

// damaged is the error of a record that fails its checks: it is reported, never followed.
func damaged(run string, rev uint64, err error) error {
	if errors.Is(err, kc.ErrNewerSchema) {
		return exitCode{code: 3, err: fmt.Errorf("run %s (revision %d): %w: use the newer release's cairn (or cairn status %s --json for the raw record)", run, rev, err, run)}
	}
	return exitCode{code: 3, err: fmt.Errorf("run %s: the checkpoint (revision %d) is damaged, not followed: %w (cairn status %s --json shows it raw)", run, rev, err, run)}
}
