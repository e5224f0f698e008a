package assets_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
)

var steps = []string{"fetch", "extract", "post-ledger"}

func config() assets.Config { return assets.Config{Steps: steps} }

func ensure(t *testing.T, js jetstream.JetStream, c assets.Config) {
	t.Helper()
	if err := assets.Ensure(t.Context(), js, c); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("looking up stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

func consumerConfig(t *testing.T, js jetstream.JetStream, stream, name string) jetstream.ConsumerConfig {
	t.Helper()
	c, err := js.Consumer(t.Context(), stream, name)
	if err != nil {
		t.Fatalf("looking up consumer %s on %s: %v", name, stream, err)
	}
	return c.CachedInfo().Config
}

func epoch(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	return streamConfig(t, js, "KV_"+assets.BucketRuns).Metadata[assets.EpochKey]
}

func TestEnsureCreatesStreams(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ensure(t, js, config())

	tests := []struct {
		name      string
		subjects  []string
		retention jetstream.RetentionPolicy
	}{
		{"CAIRN_RUNS", []string{"cairn.runs.start", "cairn.runs.*.*"}, jetstream.WorkQueuePolicy},
		{"CAIRN_STEPS", []string{"cairn.step.*.*"}, jetstream.WorkQueuePolicy},
		{"CAIRN_SAGA", []string{"cairn.saga.>"}, jetstream.LimitsPolicy},
		{"CAIRN_OUTBOX", []string{"cairn.outbox.>"}, jetstream.LimitsPolicy},
		{"CAIRN_AUDIT", []string{"cairn.audit.>"}, jetstream.LimitsPolicy},
		{"CAIRN_REJECTED", []string{"cairn.rejected"}, jetstream.LimitsPolicy},
	}
	for _, tt := range tests {
		got := streamConfig(t, js, tt.name)
		if !slices.Equal(got.Subjects, tt.subjects) {
			t.Errorf("stream %s: subjects %v, want %v", tt.name, got.Subjects, tt.subjects)
		}
		if got.Retention != tt.retention {
			t.Errorf("stream %s: retention %v, want %v", tt.name, got.Retention, tt.retention)
		}
		if got.Storage != jetstream.FileStorage {
			t.Errorf("stream %s: storage %v, want file", tt.name, got.Storage)
		}
		if got.Replicas != 1 {
			t.Errorf("stream %s: replicas %d, want 1", tt.name, got.Replicas)
		}
	}
	// Only CAIRN_STEPS and CAIRN_AUDIT may persist asynchronously (DESIGN.md); the package
	// keeps CAIRN_AUDIT on the default (see the comment in Streams).
	for _, name := range []string{"CAIRN_RUNS", "CAIRN_SAGA", "CAIRN_OUTBOX", "CAIRN_REJECTED"} {
		if pm := streamConfig(t, js, name).PersistMode; pm != jetstream.DefaultPersistMode {
			t.Errorf("stream %s: persist mode %v, want default", name, pm)
		}
	}
	if pm := streamConfig(t, js, "CAIRN_STEPS").PersistMode; pm != jetstream.AsyncPersistMode {
		t.Errorf("stream CAIRN_STEPS: persist mode %v, want async with one replica", pm)
	}
}

func TestEnsureCreatesBucketsAndObjectStore(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ctx := t.Context()
	ensure(t, js, config())

	for _, b := range []string{"cairn-runs", "cairn-memo", "cairn-handovers", "cairn-outbox-sent", "cairn-natural-keys", "cairn-limits"} {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Errorf("bucket %s: %v", b, err)
			continue
		}
		if kv.Bucket() != b {
			t.Errorf("bucket %s is named %s", b, kv.Bucket())
		}
	}
	if h := streamConfig(t, js, "KV_cairn-runs").MaxMsgsPerSubject; h != 16 {
		t.Errorf("cairn-runs history %d, want 16", h)
	}
	if h := streamConfig(t, js, "KV_cairn-memo").MaxMsgsPerSubject; h != 1 {
		t.Errorf("cairn-memo history %d, want 1", h)
	}
	obj, err := js.ObjectStore(ctx, "cairn-artifacts")
	if err != nil {
		t.Fatalf("object store cairn-artifacts: %v", err)
	}
	st, err := obj.Status(ctx)
	if err != nil {
		t.Fatalf("object store status: %v", err)
	}
	if st.Bucket() != "cairn-artifacts" || st.Replicas() != 1 || st.Storage() != jetstream.FileStorage {
		t.Errorf("object store %s: replicas %d storage %v", st.Bucket(), st.Replicas(), st.Storage())
	}

	e := epoch(t, js)
	if e == "" {
		t.Fatalf("cairn-runs has no %s metadata", assets.EpochKey)
	}
	for _, b := range []string{"cairn-memo", "cairn-handovers", "cairn-outbox-sent"} {
		if v, ok := streamConfig(t, js, "KV_"+b).Metadata[assets.EpochKey]; ok {
			t.Errorf("bucket %s carries an epoch %q", b, v)
		}
	}
}

func TestEnsureCreatesConsumers(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ensure(t, js, config())

	type want struct {
		stream, name string
		filters      []string
	}
	wants := []want{
		{"CAIRN_RUNS", "control", []string{
			"cairn.runs.start", "cairn.runs.*.resume", "cairn.runs.*.approve",
			"cairn.runs.*.reject", "cairn.runs.*.cancel", "cairn.runs.*.rerun",
		}},
		{"CAIRN_RUNS", "compensator", []string{"cairn.runs.*.undo"}},
		{"CAIRN_OUTBOX", "outbox-sender", []string{"cairn.outbox.>"}},
	}
	for _, s := range steps {
		wants = append(wants, want{"CAIRN_STEPS", s, []string{"cairn.step." + s + ".*"}})
	}
	for _, w := range wants {
		got := consumerConfig(t, js, w.stream, w.name)
		filters := got.FilterSubjects
		if got.FilterSubject != "" {
			filters = append([]string{got.FilterSubject}, filters...)
		}
		if !slices.Equal(filters, w.filters) {
			t.Errorf("consumer %s on %s: filters %v, want %v", w.name, w.stream, filters, w.filters)
		}
		if slices.Contains(filters, "cairn.runs.*.undo") && w.name == "control" {
			t.Errorf("control filters undo")
		}
		if got.Durable != w.name {
			t.Errorf("consumer %s on %s: durable %q", w.name, w.stream, got.Durable)
		}
		if got.AckPolicy != jetstream.AckExplicitPolicy {
			t.Errorf("consumer %s on %s: ack policy %v, want explicit", w.name, w.stream, got.AckPolicy)
		}
		if got.AckWait != 30*time.Second {
			t.Errorf("consumer %s on %s: ack wait %v, want 30s", w.name, w.stream, got.AckWait)
		}
		wantMax := 20
		if w.name == "outbox-sender" {
			wantMax = -1 // never gives a message up
		}
		if got.MaxDeliver != wantMax {
			t.Errorf("consumer %s on %s: max deliver %d, want %d", w.name, w.stream, got.MaxDeliver, wantMax)
		}
		if len(got.BackOff) != 0 {
			t.Errorf("consumer %s on %s: backoff %v, want none", w.name, w.stream, got.BackOff)
		}
	}
}

func TestEnsureTwiceKeepsEpoch(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ensure(t, js, config())
	first := epoch(t, js)
	ensure(t, js, config())
	if second := epoch(t, js); second != first {
		t.Fatalf("epoch changed from %q to %q", first, second)
	}
	if err := assets.Check(t.Context(), js, config()); err != nil {
		t.Fatalf("Check after Ensure: %v", err)
	}
	if third := epoch(t, js); third != first {
		t.Fatalf("Check changed the epoch from %q to %q", first, third)
	}
}

func TestEnsureAddsAStep(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ensure(t, js, config())
	more := assets.Config{Steps: append(slices.Clone(steps), "debit-notes")}
	if err := assets.Check(t.Context(), js, more); !errors.Is(err, assets.ErrMissing) || !strings.Contains(err.Error(), "debit-notes") {
		t.Fatalf("Check with a new step = %v, want ErrMissing naming debit-notes", err)
	}
	ensure(t, js, more)
	consumerConfig(t, js, "CAIRN_STEPS", "debit-notes")
}

func TestCheckEmptyServer(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	err := assets.Check(t.Context(), js, config())
	if !errors.Is(err, assets.ErrMissing) {
		t.Fatalf("Check on an empty server = %v, want ErrMissing", err)
	}
	for _, name := range []string{"CAIRN_RUNS", "CAIRN_STEPS", "CAIRN_REJECTED", "cairn-runs", "cairn-memo", "cairn-artifacts"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	names := js.StreamNames(t.Context())
	for n := range names.Name() {
		t.Errorf("Check created stream %s", n)
	}
}

func TestEnsureRefusesForeignStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		pre   jetstream.StreamConfig
		field string
	}{
		{
			name:  "subjects",
			pre:   jetstream.StreamConfig{Name: "CAIRN_SAGA", Subjects: []string{"other.saga.>"}, Storage: jetstream.FileStorage},
			field: "subjects",
		},
		{
			name: "retention",
			pre: jetstream.StreamConfig{Name: "CAIRN_SAGA", Subjects: []string{"cairn.saga.>"},
				Retention: jetstream.InterestPolicy, Storage: jetstream.FileStorage},
			field: "retention",
		},
		{
			name:  "storage",
			pre:   jetstream.StreamConfig{Name: "CAIRN_SAGA", Subjects: []string{"cairn.saga.>"}, Storage: jetstream.MemoryStorage},
			field: "storage",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			js := natstest.JetStream(t)
			ctx := t.Context()
			if _, err := js.CreateStream(ctx, tt.pre); err != nil {
				t.Fatalf("creating the foreign stream: %v", err)
			}
			before := streamConfig(t, js, "CAIRN_SAGA")

			err := assets.Ensure(ctx, js, config())
			if !errors.Is(err, assets.ErrMismatch) {
				t.Fatalf("Ensure = %v, want ErrMismatch", err)
			}
			if !strings.Contains(err.Error(), "CAIRN_SAGA") || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name CAIRN_SAGA and %s", err, tt.field)
			}
			after := streamConfig(t, js, "CAIRN_SAGA")
			if !slices.Equal(after.Subjects, before.Subjects) || after.Retention != before.Retention ||
				after.Storage != before.Storage || after.Replicas != before.Replicas {
				t.Errorf("Ensure changed the stream: %+v, was %+v", after, before)
			}
			if err := assets.Check(ctx, js, config()); !errors.Is(err, assets.ErrMismatch) {
				t.Errorf("Check = %v, want ErrMismatch", err)
			}
		})
	}
}

func TestConsumerAckWaitMismatch(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ctx := t.Context()
	ensure(t, js, config())

	cc := consumerConfig(t, js, "CAIRN_STEPS", "extract")
	cc.AckWait = 5 * time.Second
	if _, err := js.UpdateConsumer(ctx, "CAIRN_STEPS", cc); err != nil {
		t.Fatalf("changing the ack wait: %v", err)
	}
	for _, call := range []struct {
		name string
		f    func(context.Context, jetstream.JetStream, assets.Config) error
	}{{"Check", assets.Check}, {"Ensure", assets.Ensure}} {
		err := call.f(ctx, js, config())
		if !errors.Is(err, assets.ErrMismatch) {
			t.Fatalf("%s = %v, want ErrMismatch", call.name, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "consumer extract on CAIRN_STEPS") || !strings.Contains(msg, "ack wait") {
			t.Errorf("%s error %q does not name the consumer and the ack wait", call.name, msg)
		}
		if strings.Contains(msg, "consumer fetch") || strings.Contains(msg, "consumer control") {
			t.Errorf("%s error %q names consumers that match", call.name, msg)
		}
	}
	if got := consumerConfig(t, js, "CAIRN_STEPS", "extract").AckWait; got != 5*time.Second {
		t.Errorf("Ensure changed the consumer's ack wait to %v", got)
	}
	// The configured ack wait is what consumers are compared with.
	c := config()
	c.AckWait = 5 * time.Second
	if err := assets.Check(ctx, js, c); !errors.Is(err, assets.ErrMismatch) || strings.Contains(err.Error(), "consumer extract") {
		t.Errorf("Check with AckWait 5s = %v, want a mismatch on every consumer but extract", err)
	}
}

func TestConsumerBackOffMismatch(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ctx := t.Context()
	ensure(t, js, config())
	cc := consumerConfig(t, js, "CAIRN_STEPS", "fetch")
	cc.BackOff = []time.Duration{time.Second, 2 * time.Second}
	cc.AckWait = 0 // the server sets it to the first backoff
	if _, err := js.UpdateConsumer(ctx, "CAIRN_STEPS", cc); err != nil {
		t.Skipf("the server refuses adding a backoff to a consumer: %v", err)
	}
	err := assets.Check(ctx, js, config())
	if !errors.Is(err, assets.ErrMismatch) || !strings.Contains(err.Error(), "backoff") {
		t.Fatalf("Check = %v, want ErrMismatch naming the backoff", err)
	}
}

func TestReplicasRefused(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	for _, r := range []int{2, 4, -1} {
		c := config()
		c.Replicas = r
		if err := assets.Ensure(t.Context(), js, c); err == nil || !strings.Contains(err.Error(), "replicas") {
			t.Errorf("Ensure with Replicas %d = %v, want a replicas error", r, err)
		}
	}
	names := js.StreamNames(t.Context())
	for n := range names.Name() {
		t.Errorf("a refused Ensure created stream %s", n)
	}
}

func TestNoStepsRefused(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	if err := assets.Ensure(t.Context(), js, assets.Config{}); err == nil {
		t.Fatal("Ensure without steps = nil error")
	}
}

func TestForeignBuckets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		pre   jetstream.KeyValueConfig
		field string
	}{
		{"no epoch", jetstream.KeyValueConfig{Bucket: "cairn-runs", History: 16, Storage: jetstream.FileStorage}, "cairn.epoch"},
		{"history", jetstream.KeyValueConfig{Bucket: "cairn-handovers", History: 2, Storage: jetstream.FileStorage}, "history"},
		{"storage", jetstream.KeyValueConfig{Bucket: "cairn-memo", History: 1, Storage: jetstream.MemoryStorage}, "storage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			js := natstest.JetStream(t)
			if _, err := js.CreateKeyValue(t.Context(), tt.pre); err != nil {
				t.Fatalf("creating the foreign bucket: %v", err)
			}
			err := assets.Ensure(t.Context(), js, config())
			if !errors.Is(err, assets.ErrMismatch) {
				t.Fatalf("Ensure = %v, want ErrMismatch", err)
			}
			if !strings.Contains(err.Error(), "bucket "+tt.pre.Bucket) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name bucket %s and %s", err, tt.pre.Bucket, tt.field)
			}
			if tt.pre.Bucket == "cairn-runs" && epoch(t, js) != "" {
				t.Error("Ensure added an epoch to an existing bucket")
			}
		})
	}
}

func TestForeignObjectStore(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	if _, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: "cairn-artifacts", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("creating the foreign object store: %v", err)
	}
	err := assets.Ensure(t.Context(), js, config())
	if !errors.Is(err, assets.ErrMismatch) || !strings.Contains(err.Error(), "object store cairn-artifacts: storage") {
		t.Fatalf("Ensure = %v, want ErrMismatch naming the object store's storage", err)
	}
}

// A deployment made by an earlier release has an outbox-sender durable that drops a message
// after 20 deliveries: Check refuses it, Ensure (cairn init) updates it in place and says so.
func TestEnsureUpdatesTheOutboxSenderDeliveryLimit(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ensure(t, js, config())
	old := consumerConfig(t, js, "CAIRN_OUTBOX", "outbox-sender")
	old.MaxDeliver = 20
	if _, err := js.UpdateConsumer(t.Context(), "CAIRN_OUTBOX", old); err != nil {
		t.Fatalf("setting the old limit: %v", err)
	}
	if err := assets.Check(t.Context(), js, config()); !errors.Is(err, assets.ErrMismatch) || !strings.Contains(err.Error(), "max deliver is 20, want -1") {
		t.Fatalf("Check = %v, want a mismatch naming max deliver", err)
	}
	changed, err := assets.EnsureReport(t.Context(), js, config())
	if err != nil {
		t.Fatalf("EnsureReport: %v", err)
	}
	if len(changed) != 1 || !strings.Contains(changed[0], "consumer outbox-sender on CAIRN_OUTBOX") {
		t.Fatalf("changes %q, want the outbox-sender update", changed)
	}
	if got := consumerConfig(t, js, "CAIRN_OUTBOX", "outbox-sender").MaxDeliver; got != -1 {
		t.Fatalf("max deliver after Ensure = %d, want -1", got)
	}
	if err := assets.Check(t.Context(), js, config()); err != nil {
		t.Fatalf("Check after Ensure: %v", err)
	}
}

// A check whose context ends says so, not that the server has no JetStream (a host stopped
// while it starts read "offers no JetStream: context canceled").
func TestCheckWithAnEndedContext(t *testing.T) {
	js := natstest.JetStream(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := assets.Check(ctx, js, assets.Config{Steps: []string{"fetch"}})
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "offers no JetStream") {
		t.Fatalf("Check with an ended context: %v, want context.Canceled, not a server without JetStream", err)
	}
}
