package events

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
)

// startJetStream runs an embedded nats-server with JetStream for one test.
func startJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	return natstest.JetStream(t)
}

// TestPublishDeduplicatesByID shows that the CloudEvent id, carried as
// Nats-Msg-Id, makes a retried publish a duplicate, and that what the stream
// stores decodes back to the event.
func TestPublishDeduplicatesByID(t *testing.T) {
	t.Parallel()
	js := startJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "CAIRN_STEPS",
		Subjects:  []string{"cairn.step.*.*"},
		Retention: jetstream.WorkQueuePolicy,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	e := mustEvent(t, StepReadyID(testRun, "fetch", 1), TypeStepReady, testRun, StepReady{RunID: testRun, Step: "fetch"})
	e.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	publish := func() *jetstream.PubAck {
		m, err := Encode(StepSubject("fetch", testRun), e)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("PublishMsg: %v", err)
		}
		return ack
	}
	first, second := publish(), publish()
	if first.Duplicate || first.Sequence != 1 {
		t.Fatalf("first ack = %+v, want sequence 1, not a duplicate", first)
	}
	if !second.Duplicate || second.Sequence != first.Sequence {
		t.Fatalf("second ack = %+v, want a duplicate of sequence %d", second, first.Sequence)
	}

	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}

	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "fetch", FilterSubject: "cairn.step.fetch.*", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	var got []Event
	for jm := range batch.Messages() {
		e, err := Decode(&nats.Msg{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		got = append(got, e)
		if err := jm.DoubleAck(ctx); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatalf("batch: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("fetched %d events, want 1", len(got))
	}
	sameEvent(t, got[0], e)
	var ready StepReady
	if err := got[0].Unmarshal(&ready); err != nil || ready.Step != "fetch" {
		t.Fatalf("Unmarshal = %+v, %v", ready, err)
	}
}

// TestReadSubject reads back every stored event of one run in order, skipping a message
// that is no event and the events of another run.
func TestReadSubject(t *testing.T) {
	js := startJetStream(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AUDIT", Subjects: []string{"cairn.audit.>"}}); err != nil {
		t.Fatal(err)
	}
	publish := func(run, id string) { publishAudit(t, ctx, js, run, id) }
	publish("run-a", "a1")
	publish("run-b", "b1")
	if _, err := js.Publish(ctx, AuditSubject("run-a"), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	publish("run-a", "a2")
	evs, err := ReadSubject(ctx, js, "AUDIT", AuditSubject("run-a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].ID != "a1" || evs[1].ID != "a2" {
		t.Fatalf("read %+v, want a1 and a2", evs)
	}
}

// TestReadSubjectLong reads a history longer than the part asked for one message at a time:
// the rest comes through a consumer, in order, and a short read creates no consumer.
func TestReadSubjectLong(t *testing.T) {
	js := startJetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AUDIT", Subjects: []string{"cairn.audit.>"}})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(run, id string) { publishAudit(t, ctx, js, run, id) }
	long := directMax*2 + 5
	for i := range long {
		publish("run-long", fmt.Sprintf("l%d", i))
		if i%3 == 0 {
			publish("run-short", fmt.Sprintf("s%d", i))
		}
	}
	consumers := func() int {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	short, err := ReadSubject(ctx, js, "AUDIT", AuditSubject("run-short"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (long + 2) / 3; len(short) != want || short[0].ID != "s0" {
		t.Fatalf("read %d events of run-short, want %d from s0", len(short), want)
	}
	if n := consumers(); n != 0 {
		t.Fatalf("a read of %d events left %d consumers, want none", len(short), n)
	}
	evs, err := ReadSubject(ctx, js, "AUDIT", AuditSubject("run-long"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != long {
		t.Fatalf("read %d events of run-long, want %d", len(evs), long)
	}
	for i, e := range evs {
		if want := fmt.Sprintf("l%d", i); e.ID != want {
			t.Fatalf("event %d is %s, want %s", i, e.ID, want)
		}
	}
}

// publishAudit stores an audit event of run with id.
func publishAudit(t *testing.T, ctx context.Context, js jetstream.JetStream, run, id string) {
	t.Helper()
	e, err := New(id, TypeAudit, "/cairn/test", run, time.Unix(1, 0), Audit{RunID: run, Event: "x"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Encode(AuditSubject(run), e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}
