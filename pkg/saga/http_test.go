package saga_test

import (
	"encoding/json"
	"testing"

	"github.com/cairnhq/cairn/pkg/saga"
)

// An HTTP write's outcome carries its receipt; other records carry none.
func TestReceiptRoundTrip(t *testing.T) {
	intent := saga.Record{Key: "k", RunID: "r", Step: "upload", Phase: saga.Intent, Digest: "sha256:ab",
		Payload: json.RawMessage(`{"a":1}`), Reverse: &saga.Reverse{System: saga.HTTP, Key: "k:rev"}}
	want := saga.Receipt{Status: 201, Reference: "/entries/7", AnswerDigest: "sha256:cd", Replayed: true}
	out, err := saga.WithReceipt(intent, want)
	if err != nil {
		t.Fatal(err)
	}
	if out.Phase != saga.Outcome || out.Outcome != "done" || out.Reverse != nil || out.Digest != "" || out.Key != "k" {
		t.Errorf("outcome %+v", out)
	}
	b, _ := json.Marshal(out)
	var back saga.Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got, ok := saga.ReceiptOf(back); !ok || got != want {
		t.Errorf("receipt %+v %v, want %+v", got, ok, want)
	}
	if _, ok := saga.ReceiptOf(intent); ok {
		t.Error("an intent carries a receipt")
	}
	if _, ok := saga.ReceiptOf(saga.Record{Phase: saga.Outcome, Outcome: "done"}); ok {
		t.Error("a ledger outcome carries a receipt")
	}
}
