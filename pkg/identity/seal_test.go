package identity_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/identity"
)

// A seal of the release that signed only records (no "messages") has its saga and outbox
// sequences moved, once, at the next registration: the unsigned messages that release wrote
// stay the old release's; and its history (no "chained") set once to where the bucket stands
// then, so the unchained records stay taken. Its records' revision never moves, and a seal
// of this release never moves at all.
func TestSealOnceMovesAnOldSealsMessagesOnce(t *testing.T) {
	ctx := context.Background()
	js := natstest.JetStream(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: identity.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(map[string]any{"runs": 40, "saga": 7, "outbox": 3, "at": "2026-12-01T00:00:00Z"})
	if _, err := kv.Create(ctx, identity.SealKey, old); err != nil {
		t.Fatal(err)
	}
	got, err := identity.SealOnce(ctx, kv, identity.Seal{Runs: 90, Saga: 25, Outbox: 12, At: "2026-12-02T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	want := identity.Seal{Runs: 40, Saga: 25, Outbox: 12, At: "2026-12-01T00:00:00Z", Messages: true, History: 90, Chained: true}
	if got != want {
		t.Fatalf("seal %+v, want %+v", got, want)
	}
	again, err := identity.SealOnce(ctx, kv, identity.Seal{Runs: 120, Saga: 60, Outbox: 30})
	if err != nil {
		t.Fatal(err)
	}
	if again != want {
		t.Fatalf("seal %+v after a second registration, want it unmoved: %+v", again, want)
	}
	e, err := kv.Get(ctx, identity.SealKey)
	if err != nil {
		t.Fatal(err)
	}
	var stored identity.Seal
	if err := json.Unmarshal(e.Value(), &stored); err != nil || stored != want {
		t.Fatalf("stored seal %s (%v), want %+v", e.Value(), err, want)
	}
}

// A first registration records the seal as given, marked as this release's.
func TestSealOnceRecordsAFirstSeal(t *testing.T) {
	ctx := context.Background()
	js := natstest.JetStream(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: identity.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	got, err := identity.SealOnce(ctx, kv, identity.Seal{Runs: 5, Saga: 2, Outbox: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := (identity.Seal{Runs: 5, Saga: 2, Outbox: 1, Messages: true, History: 5, Chained: true}); got != want {
		t.Fatalf("seal %+v, want %+v", got, want)
	}
}
