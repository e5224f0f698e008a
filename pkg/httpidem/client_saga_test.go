package httpidem_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/saga"
)

// A step wires the client's hooks to the saga: the intent is on CAIRN_SAGA before the
// request is sent, the outcome with the receipt after, even when the reply was lost and
// the lookup settled it.
func TestClientRecordsIntentAndReceiptOnTheSaga(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: assets.StreamSaga, Subjects: []string{"cairn.saga.>"}}); err != nil {
		t.Fatal(err)
	}
	a, h := newAPI(t)
	srv := httptest.NewServer(dropFirst(h, 1, nil))
	t.Cleanup(srv.Close)

	const run, step = "run-5", "upload"
	record := func(r httpidem.Request, fp string) saga.Record {
		payload, _ := json.Marshal(map[string]string{"url": r.URL, "body": string(r.Body)})
		return saga.Record{Key: r.Key, RunID: run, Step: step, Generation: 1, Token: r.Token,
			Phase: saga.Intent, Payload: payload, Digest: fp}
	}
	ranAtIntent := int64(-1)
	cl := newClient(t, httpidem.ClientConfig{
		OnIntent: func(ctx context.Context, r httpidem.Request, fp string) error {
			ranAtIntent = a.runs.Load()
			return saga.Publish(ctx, js, step, time.Now(), record(r, fp))
		},
		OnReceipt: func(ctx context.Context, r httpidem.Request, rc httpidem.Receipt) error {
			out, err := saga.WithReceipt(record(r, rc.Fingerprint), saga.Receipt{Status: rc.Status,
				Reference: rc.Reference, AnswerDigest: rc.AnswerDigest, Replayed: rc.Replayed})
			if err != nil {
				return err
			}
			return saga.Publish(ctx, js, step, time.Now(), out)
		},
	})
	rc, err := cl.Write(ctx, httpidem.Request{URL: srv.URL + "/entries", Key: "run-5:upload:1", Run: run, Token: 4, Body: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if ranAtIntent != 0 {
		t.Errorf("the handler had run %d times when the intent was recorded, want 0", ranAtIntent)
	}
	tally, err := saga.ReadTally(ctx, js, assets.Default, nil, run, step, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tally.Open() != 0 || tally.First["run-5:upload:1"].Digest != rc.Fingerprint {
		t.Errorf("tally: %d open, first intent %+v", tally.Open(), tally.First["run-5:upload:1"])
	}
	stored, err := events.ReadStored(ctx, js, assets.StreamSaga, events.SagaSubject(run, step))
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 {
		t.Fatalf("%d records, want the intent and the outcome", len(stored))
	}
	var out saga.Record
	if err := stored[1].Event.Unmarshal(&out); err != nil {
		t.Fatal(err)
	}
	got, ok := saga.ReceiptOf(out)
	want := saga.Receipt{Status: rc.Status, Reference: rc.Reference, AnswerDigest: rc.AnswerDigest, Replayed: true}
	if !ok || got != want || out.Outcome != "done" {
		t.Errorf("outcome %+v carries %+v, want %+v", out, got, want)
	}
}
