package assets_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
)

// storeStreams are the streams of a config's buckets and object store, by asset name.
func storeStreams(c assets.Config) map[string]string {
	out := map[string]string{}
	for _, b := range c.Buckets() {
		out["KV_"+b.Bucket] = b.Bucket
	}
	out["OBJ_"+c.ObjectStore().Bucket] = c.ObjectStore().Bucket
	return out
}

// Every bucket, the object store and every stream has a size limit; the ones whose data
// recovery needs refuse a write past it (DiscardNew) and have no age limit.
func TestEveryAssetIsBounded(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	c := config()
	ensure(t, js, c)
	recording := map[string]bool{assets.StreamAudit: true, assets.StreamRejected: true}
	names := []string{}
	for _, s := range c.Streams() {
		names = append(names, s.Name)
	}
	for s := range storeStreams(c) {
		names = append(names, s)
	}
	for _, name := range names {
		got := streamConfig(t, js, name)
		if got.MaxBytes <= 0 {
			t.Errorf("stream %s: no size limit (max bytes %d)", name, got.MaxBytes)
		}
		if recording[name] {
			continue
		}
		if got.Discard != jetstream.DiscardNew || got.MaxAge != 0 {
			t.Errorf("stream %s: discard %v, max age %v; want new writes refused and no age limit", name, got.Discard, got.MaxAge)
		}
		if !strings.HasPrefix(name, "OBJ_") && got.MaxMsgSize <= 0 {
			t.Errorf("stream %s: no message size limit", name)
		}
	}
	if got := streamConfig(t, js, "KV_"+assets.BucketRuns); got.MaxBytes != assets.DefaultRunsBytes || got.MaxMsgSize != assets.MaxRecordSize {
		t.Errorf("bucket %s: max bytes %d, value size %d; want %d, %d", assets.BucketRuns, got.MaxBytes, got.MaxMsgSize, assets.DefaultRunsBytes, assets.MaxRecordSize)
	}
	if got := streamConfig(t, js, assets.StreamSaga); got.MaxBytes != assets.DefaultSagaBytes {
		t.Errorf("stream %s: max bytes %d, want %d", assets.StreamSaga, got.MaxBytes, assets.DefaultSagaBytes)
	}
}

// The server refuses what is over a limit: a value larger than its bucket takes, a message
// larger than its stream takes, and a write to a full bucket, stream or object store; what
// is stored stays.
func TestOverTheLimitRefused(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	c := config()
	c.Limits = assets.Limits{Buckets: assets.MinLimitBytes, Artifacts: assets.MinLimitBytes, Saga: assets.MinLimitBytes}
	ensure(t, js, c)
	ctx := t.Context()
	tooLarge := func(what string, err error) {
		t.Helper()
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamMessageExceedsMaximum {
			t.Errorf("%s: %v, want the server's refusal of its size (err_code %d)", what, err, jetstream.JSErrCodeStreamMessageExceedsMaximum)
		}
	}
	runs, err := js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runs.Put(ctx, "run-1", bytes.Repeat([]byte("x"), assets.MaxRecordSize+1))
	tooLarge("a record over the runs bucket's value size", err)
	_, err = js.Publish(ctx, "cairn.step.a.run-1", bytes.Repeat([]byte("x"), assets.MaxEventSize+1))
	tooLarge("a step event over the work queue's message size", err)

	// A full bucket refuses the next write and keeps what it holds.
	handovers, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("n"), 60<<10)
	stored, refused := 0, error(nil)
	for i := range 40 {
		if _, err := handovers.Put(ctx, "note-"+string(rune('a'+i)), value); err != nil {
			refused = err
			break
		}
		stored++
	}
	if refused == nil || stored == 0 || stored >= 40 {
		t.Fatalf("a 1 MiB bucket took %d notes of 60 KiB, then %v; want it full and refusing", stored, refused)
	}
	if e, err := handovers.Get(ctx, "note-a"); err != nil || len(e.Value()) != len(value) {
		t.Errorf("the first note after the refusal: %v", err)
	}
	// So does a full saga: the publish is refused, nothing older is dropped.
	var sagaRefused error
	for range 40 {
		if _, err := js.Publish(ctx, "cairn.saga.run-1.a", bytes.Repeat([]byte("s"), 60<<10)); err != nil {
			sagaRefused = err
			break
		}
	}
	if sagaRefused == nil {
		t.Error("a full saga stream took another intent")
	}
	if info := streamConfig(t, js, assets.StreamSaga); info.Discard != jetstream.DiscardNew {
		t.Errorf("saga discard %v", info.Discard)
	}
	s, err := js.Stream(ctx, assets.StreamSaga)
	if err != nil {
		t.Fatal(err)
	}
	if first := s.CachedInfo().State.FirstSeq; first != 1 {
		t.Errorf("the saga's first message is %d after it filled: an intent was dropped", first)
	}
	// And the object store.
	obj, err := js.ObjectStore(ctx, assets.ObjectArtifacts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, "big", bytes.Repeat([]byte("o"), 2<<20)); err == nil {
		t.Error("a 1 MiB object store took a 2 MiB object")
	}
}

// Ensure (cairn init) sets the limits on assets an earlier release made without them, says
// so, and changes nothing the second time; an asset that already holds more than a new
// limit is left as it is, the error naming the setting to raise.
func TestEnsureSetsLimitsOnExistingAssets(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	c := config()
	ensure(t, js, c)
	names := []string{assets.StreamRuns, assets.StreamSteps, assets.StreamSaga, assets.StreamOutbox}
	for s := range storeStreams(c) {
		names = append(names, s)
	}
	for _, name := range names { // as an earlier release made them
		got := streamConfig(t, js, name)
		got.MaxBytes, got.MaxMsgSize = -1, -1
		if !strings.HasPrefix(name, "KV_") && !strings.HasPrefix(name, "OBJ_") {
			got.Discard = jetstream.DiscardOld
		}
		if _, err := js.UpdateStream(t.Context(), got); err != nil {
			t.Fatalf("lifting the limits of %s: %v", name, err)
		}
	}
	if err := assets.Check(t.Context(), js, c); err != nil {
		t.Fatalf("Check of assets without size limits: %v", err)
	}
	changed, err := assets.EnsureReport(t.Context(), js, c)
	if err != nil {
		t.Fatalf("EnsureReport: %v", err)
	}
	if len(changed) != len(names) {
		t.Errorf("changes %q, want one for each of %v", changed, names)
	}
	for _, name := range names {
		if got := streamConfig(t, js, name); got.MaxBytes <= 0 || got.Discard != jetstream.DiscardNew {
			t.Errorf("%s after Ensure: max bytes %d, discard %v", name, got.MaxBytes, got.Discard)
		}
	}
	if changed, err := assets.EnsureReport(t.Context(), js, c); err != nil || len(changed) != 0 {
		t.Fatalf("Ensure again: %q, %v; want no change", changed, err)
	}

	// A bucket holding 2 MiB is not cut to 1 MiB: every write would be refused at once.
	memo, err := js.KeyValue(t.Context(), assets.BucketMemo)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := memo.Put(t.Context(), "answer-"+string(rune('a'+i)), bytes.Repeat([]byte("m"), 800<<10)); err != nil {
			t.Fatal(err)
		}
	}
	small := c
	small.Limits = assets.Limits{Memo: assets.MinLimitBytes}
	_, err = assets.EnsureReport(t.Context(), js, small)
	if !errors.Is(err, assets.ErrMismatch) || !strings.Contains(err.Error(), "CAIRN_MAX_MEMO_BYTES") || !strings.Contains(err.Error(), "bucket "+assets.BucketMemo) {
		t.Errorf("Ensure with a limit below the memo's contents: %v; want it refused naming the bucket and CAIRN_MAX_MEMO_BYTES", err)
	}
	if got := streamConfig(t, js, "KV_"+assets.BucketMemo); got.MaxBytes != assets.DefaultMemoBytes {
		t.Errorf("memo's limit after the refused Ensure: %d, want %d", got.MaxBytes, assets.DefaultMemoBytes)
	}
}
