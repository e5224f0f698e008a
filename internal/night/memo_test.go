package night

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/idempotency"
)

// Two attempts that raced past the memo's read save their answers: the same answer is a
// harmless repeat, another is refused naming the key and both digests, and the memo keeps
// the first, which is what later attempts read.
func TestSaveMemoRefusesAnotherAnswer(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cairn-memo"})
	if err != nil {
		t.Fatal(err)
	}
	const key = "run-1.5f1c.0123456789abcdef"
	first := memoAnswer{Answer: json.RawMessage(`{"invoice_no":"INV-1","lines":[{"qty":10}]}`)}
	second := memoAnswer{Answer: json.RawMessage(`{"invoice_no":"INV-1","lines":[{"qty":12}]}`)}
	if _, err := saveMemo(ctx, kv, key, first); err != nil {
		t.Fatalf("first save: %v", err)
	}
	got, err := saveMemo(ctx, kv, key, first)
	if err != nil || string(got.Answer) != string(first.Answer) {
		t.Fatalf("the same answer again = %s, %v; want the first, nil", got.Answer, err)
	}

	got, err = saveMemo(ctx, kv, key, second)
	if !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("another answer = %v, want idempotency.ErrConflict", err)
	}
	b1, _ := json.Marshal(first)
	b2, _ := json.Marshal(second)
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != key || c.Stored != idempotency.Digest(b1) || c.New != idempotency.Digest(b2) {
		t.Fatalf("conflict %+v, want key %s and the digests of both answers", c, key)
	}
	for _, want := range []string{key, idempotency.Digest(b1), idempotency.Digest(b2)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	if string(got.Answer) != string(first.Answer) {
		t.Errorf("returned %s, want the saved answer", got.Answer)
	}
	e, err := kv.Get(ctx, key)
	if err != nil || string(e.Value()) != string(b1) {
		t.Fatalf("memo holds %s (%v), want the first answer", e.Value(), err)
	}
}
