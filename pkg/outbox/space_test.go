package outbox_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
)

// A message queued In a pipeline's space lands on that space's outbox stream, under its
// subjects, and is sent by that space's sender, whose mark is in the space's bucket; the
// default space's stream, durable and bucket never see it, and a message queued without In
// stays the default space's.
func TestQueueInSpaceIsSentByItsSpace(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ctx := testContext(t)
	alpha := assets.MustSpace("alpha")
	for _, sp := range []assets.Space{assets.Default, alpha} {
		if err := assets.Ensure(ctx, js, assets.Config{Space: sp, Steps: []string{"s"}}); err != nil {
			t.Fatalf("ensure %s: %v", sp, err)
		}
	}
	mine := message("r-1", "note", "r-1:note:a")
	night := message("r-1", "note", "r-1:note:night")
	if err := outbox.Queue(ctx, js, mine, outbox.In(alpha)); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Queue(ctx, js, mine, outbox.In(alpha)); err != nil {
		t.Fatalf("queueing the same message again: %v", err)
	}
	if err := outbox.Queue(ctx, js, night); err != nil {
		t.Fatal(err)
	}

	for stream, want := range map[string]struct {
		msgs    uint64
		subject string
	}{
		alpha.Stream(assets.StreamOutbox): {1, "cairn.alpha.outbox.r-1.note"},
		assets.StreamOutbox:               {1, "cairn.outbox.r-1.note"},
	} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != want.msgs {
			t.Fatalf("%s holds %d messages, want %d", stream, info.State.Msgs, want.msgs)
		}
		raw, err := st.GetMsg(ctx, info.State.LastSeq)
		if err != nil {
			t.Fatal(err)
		}
		if raw.Subject != want.subject {
			t.Errorf("%s: subject %q, want %q", stream, raw.Subject, want.subject)
		}
	}

	ms := startMailServer(t)
	s, err := outbox.NewSender(outbox.SenderConfig{JS: js, Space: alpha, Transport: outbox.SMTPTransport{Addr: ms.addr},
		Logger: testLogger(t), Allow: anyMail})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, alpha.Stream(assets.StreamOutbox), assets.ConsumerOutbox)
	if err != nil {
		t.Fatal(err)
	}
	handleAll(t, s, cons, 1)
	if got := ms.mails(); len(got) != 1 {
		t.Fatalf("the mail server received %d mails, want alpha's one", len(got))
	}

	marks := map[string]jetstream.KeyValue{}
	for _, b := range []string{alpha.Bucket(assets.BucketOutbox), assets.BucketOutbox} {
		if marks[b], err = js.KeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		bucket string
		m      outbox.Message
		want   outbox.Mark
	}{
		{alpha.Bucket(assets.BucketOutbox), mine, outbox.Sent},
		{assets.BucketOutbox, mine, ""},
		{assets.BucketOutbox, night, ""},
		{alpha.Bucket(assets.BucketOutbox), night, ""},
	} {
		if got, err := outbox.MarkOf(ctx, marks[c.bucket], c.m.RunID, c.m.Key); err != nil || got != c.want {
			t.Errorf("%s: mark of %s %q (%v), want %q", c.bucket, c.m.Key, got, err, c.want)
		}
	}
	// The default space's durable still holds the night's message, untouched by alpha's sender.
	def, err := js.Consumer(ctx, assets.StreamOutbox, assets.ConsumerOutbox)
	if err != nil {
		t.Fatal(err)
	}
	info, err := def.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 1 || info.NumAckPending != 0 {
		t.Errorf("default outbox-sender: %d pending, %d unacked; want the night's 1 pending", info.NumPending, info.NumAckPending)
	}
}
