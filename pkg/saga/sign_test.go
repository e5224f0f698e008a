package saga_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/saga"
)

func signer(t *testing.T, name string) *identity.Signer {
	t.Helper()
	seed, err := identity.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	sg, err := identity.NewSigner(name, seed)
	if err != nil {
		t.Fatal(err)
	}
	return sg
}

// A reader with a trust takes a record only from the service that writes its step's
// records, signed by the key registered for it; an unsigned record only at or below the
// seal. Every other record is forged: left out of the effects and of the tally, returned
// with its sequence and reason.
func TestSignedRecords(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: assets.StreamSaga, Subjects: []string{"cairn.saga.>"}}); err != nil {
		t.Fatal(err)
	}
	pl, match, impostor := signer(t, "post-ledger"), signer(t, "match"), signer(t, "post-ledger")
	rec := func(key, phase string) saga.Record {
		return saga.Record{Key: key, RunID: "run-1", Step: "post-ledger", Phase: phase, Payload: []byte(`{}`),
			Reverse: &saga.Reverse{System: "accounts", Key: key + ":rev", Payload: []byte(`{}`)}}
	}
	publish := func(r saga.Record, sg *identity.Signer) {
		t.Helper()
		if err := saga.Publish(ctx, js, "/cairn/post-ledger", time.Unix(0, 0), r, saga.SignedBy(sg)); err != nil {
			t.Fatal(err)
		}
	}
	publish(rec("k-old", saga.Intent), nil) // seq 1: the previous release's, at the seal
	publish(rec("k-1", saga.Intent), pl)    // 2
	publish(rec("k-1", saga.Outcome), pl)   // 3
	publish(rec("k-2", saga.Intent), pl)    // 4: an intent left open
	publish(rec("k-match", saga.Intent), match)
	publish(rec("k-unsigned", saga.Intent), nil)
	publish(rec("k-impostor", saga.Intent), impostor) // a name that is post-ledger's, a key that is not
	publish(rec("k-2", saga.Outcome), match)          // 8: an outcome only post-ledger may record
	// A record of post-ledger's step, signed by post-ledger, published on report's subject.
	elsewhere := rec("k-moved", saga.Intent)
	e, err := events.New("k-moved:intent", events.TypeSaga, "/cairn/post-ledger", "run-1", time.Unix(0, 0), elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.Encode(events.SagaSubject("run-1", "report"), e)
	if err != nil {
		t.Fatal(err)
	}
	pl.SignMsg(identity.DomainSaga, m)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	trust := &saga.Trust{Ring: identity.NewRing(map[string]string{"post-ledger": pl.PublicKey(), "match": match.PublicKey()}, identity.Seal{Saga: 1})}
	effects, forged, err := saga.Effects(ctx, js, assets.Default, trust, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range effects {
		keys = append(keys, e.Intent.Key+"="+e.Outcome)
	}
	if got := strings.Join(keys, " "); got != "k-old= k-1= k-2=" {
		t.Errorf("effects %s, want the old record's and post-ledger's: k-old= k-1= k-2=", got)
	}
	want := map[uint64]error{5: identity.ErrNotAllowed, 6: identity.ErrUnsigned, 7: identity.ErrBadSignature, 8: identity.ErrNotAllowed, 9: identity.ErrNotAllowed}
	if len(forged) != len(want) {
		t.Fatalf("forged %+v, want sequences 5 to 9", forged)
	}
	for _, f := range forged {
		w, ok := want[f.Seq]
		if !ok || !strings.Contains(f.Reason, w.Error()) || f.Msg == nil {
			t.Errorf("forged record at %d: %q, want %v", f.Seq, f.Reason, w)
		}
	}

	tally, err := saga.ReadTally(ctx, js, assets.Default, trust, "run-1", "post-ledger", 0)
	if err != nil {
		t.Fatal(err)
	}
	if tally.Open() != 2 || len(tally.Forged) != 4 {
		t.Errorf("tally: %d open (k-old and k-2, match's outcome not counted), %d forged; want 2 and 4", tally.Open(), len(tally.Forged))
	}
	if _, ok := tally.First["k-match"]; ok {
		t.Errorf("a forged intent is among the first intents: %v", tally.First)
	}
	// Without a trust nothing is checked, as before keys.
	all, none, err := saga.Effects(ctx, js, assets.Default, nil, "run-1")
	if err != nil || len(all) != 7 || len(none) != 0 {
		t.Errorf("unchecked: %d effects, %d forged, %v; want 7, 0", len(all), len(none), err)
	}
}
