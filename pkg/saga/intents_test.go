package saga_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/saga"
)

// A restart's write is compared with the first intent of its key: the same digest is a
// repeat, another is refused naming both, and a key or an intent without a digest is left
// to the outside system.
func TestIntentsRefuseAnotherDigest(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: assets.StreamSaga, Subjects: []string{"cairn.saga.>"}}); err != nil {
		t.Fatal(err)
	}
	none, err := saga.ReadIntents(ctx, js, assets.Default, nil, "run-1", "debit-notes")
	if err != nil || len(none) != 0 {
		t.Fatalf("intents of a step with none = %v, %v", none, err)
	}
	d1, d2 := idempotency.Digest([]byte("note 1")), idempotency.Digest([]byte("note 2"))
	rec := func(key, phase, digest string) saga.Record {
		return saga.Record{Key: key, RunID: "run-1", Step: "debit-notes", Phase: phase, Digest: digest, Payload: []byte(`{}`)}
	}
	for _, r := range []saga.Record{rec("run-1:debit:SUP-1", saga.Intent, d1), rec("run-1:debit:SUP-1", saga.Outcome, ""),
		rec("run-1:debit:SUP-2", saga.Intent, "")} {
		if err := saga.Publish(ctx, js, "/cairn/debit-notes", time.Unix(0, 0), r); err != nil {
			t.Fatal(err)
		}
	}
	in, err := saga.ReadIntents(ctx, js, assets.Default, nil, "run-1", "debit-notes")
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 2 || in["run-1:debit:SUP-1"].Digest != d1 {
		t.Fatalf("intents %+v", in)
	}
	err = in.Refuses(rec("run-1:debit:SUP-1", saga.Intent, d2))
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != "run-1:debit:SUP-1" || c.Stored != d1 || c.New != d2 {
		t.Fatalf("another digest = %v, want a conflict naming %s and %s", err, d1, d2)
	}
	for _, r := range []saga.Record{rec("run-1:debit:SUP-1", saga.Intent, d1), rec("run-1:debit:SUP-2", saga.Intent, d2),
		rec("run-1:debit:SUP-3", saga.Intent, d2), rec("run-1:debit:SUP-1", saga.Intent, "")} {
		if err := in.Refuses(r); err != nil {
			t.Errorf("Refuses(%s, %q) = %v, want nil", r.Key, r.Digest, err)
		}
	}
}
