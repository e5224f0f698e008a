package runner

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// fuzzNight has the reference night's step names (internal/night imports this package).
var fuzzNight = pipeline.Definition{Name: "night", Steps: []pipeline.Step{
	{Name: "fetch", Kind: pipeline.SourceRead, Leased: true},
	{Name: "extract", Kind: pipeline.ModelCall, Leased: true, Effects: "model call", Memo: "cairn-memo"},
	{Name: "match", Kind: pipeline.Compute},
	{Name: "compare", Kind: pipeline.SnapshotRead, Leased: true},
	{Name: "post-ledger", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "ledger rows", Key: "<run>:<item>"},
	{Name: "update-stock", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "stock adjustments", Key: "<run>:<item>"},
	{Name: "debit-notes", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Effects: "mail", Key: "<run>:<item>"},
	{Name: "report", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Effects: "mail", Key: "<run>:<item>"},
}}

const fuzzRunID = "run-2026-10-13-ldh"

type fuzzStep struct{}

// fuzzFencedStep is fuzzStep for a step declared fenced: its fences are nothing to raise.
type fuzzFencedStep struct{ fuzzStep }

func (fuzzFencedStep) RaiseFences(context.Context, *Attempt, fence.Token) error { return nil }

func (fuzzStep) Run(context.Context, *Attempt) (*Result, error) {
	return &Result{Output: json.RawMessage(`{"ok":true}`), Items: 1}, nil
}

// Verify has nothing outside to check: the fuzzed steps write nothing.
func (fuzzStep) Verify(context.Context, *Attempt, *Result) error { return nil }

// fuzzSeeds are records as Cairn writes them at each step of a night, and the schema 1
// record of an earlier release.
func fuzzSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	at := "2026-10-13T22:00:00Z"
	var out [][]byte
	add := func(r *kc.Record) {
		b, err := json.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	for i := range fuzzNight.Steps {
		r := kc.New(fuzzRunID, kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), fuzzNight.Names(), at)
		for _, s := range r.Pipeline[:i] {
			r.Step(s).Status = kc.Verified
			r.Step(s).Output = &kc.Output{Object: fuzzRunID + "/" + s + "/x", Digest: "SHA-256=x", Size: 2}
		}
		add(r)
		r.Step(r.Pipeline[i]).Status = kc.InProgress
		r.Lease = &kc.Lease{Owner: "gone/h/1", OwnerInbox: "cairn.owner.gone.x", Token: 3, Step: r.Pipeline[i], WriteID: "w"}
		r.Progress = &kc.Progress{Step: r.Pipeline[i], Count: 1, NoProgress: 1}
		add(r)
	}
	b, err := os.ReadFile("../kvcheckpoint/testdata/schema1.json")
	if err != nil {
		tb.Fatal(err)
	}
	return append(out, b)
}

// FuzzRunnerProtocol drives the step protocol (Handle below its recover) over arbitrary
// records that decode and the step events of any step and generation: none may
// panic.
func FuzzRunnerProtocol(f *testing.F) {
	for i, b := range fuzzSeeds(f) {
		f.Add(b, uint8(i/2), uint8(0), i%2 == 0) // the record's current step
		f.Add(b, uint8(i/2+1), uint8(0), true)   // the step after it
	}
	ctx := context.Background()
	js := natstest.JetStream(f)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: fuzzNight.Names(), AckWait: 5 * time.Second}); err != nil {
		f.Fatal(err)
	}
	store, err := kc.Open(ctx, js, assets.BucketRuns, kc.WithPipeline(fuzzNight.Names()))
	if err != nil {
		f.Fatal(err)
	}
	art, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		f.Fatal(err)
	}
	notes, err := js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		f.Fatal(err)
	}
	runners := map[string]*Runner{}
	consumers := map[string]jetstream.Consumer{}
	for _, def := range fuzzNight.Steps {
		name := def.Name
		var step Step = fuzzStep{}
		if def.Fenced {
			step = fuzzFencedStep{}
		}
		r, err := New(Config{
			JS: js, Store: store, Artifacts: art, Handovers: notes, Pipeline: fuzzNight, StepName: name, Step: step,
			Heartbeat: 100 * time.Millisecond, Lease: 300 * time.Millisecond, TakeoverGap: 10 * time.Millisecond, LoopGuard: 2,
		})
		if err != nil {
			f.Fatal(err)
		}
		runners[name] = r
		if consumers[name], err = js.Consumer(ctx, assets.StreamSteps, name); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, record []byte, step, generation uint8, fetchWait bool) {
		var rec kc.Record
		if json.Unmarshal(record, &rec) != nil {
			return
		}
		rec.RunID, rec.Epoch = fuzzRunID, store.Epoch()
		b, err := kc.Encode(&rec)
		if err != nil {
			return
		}
		rev, err := store.KV().Put(ctx, fuzzRunID, b)
		if err != nil {
			t.Fatal(err)
		}
		name := fuzzNight.Steps[int(step)%len(fuzzNight.Steps)].Name
		gen := rec.Generation
		if generation%4 == 3 {
			gen = int(generation)
		}
		if err := stepevent.Publish(ctx, js, assets.Default, "/cairn/fuzz", fuzzRunID, name, gen, rev, time.Now()); err != nil {
			t.Fatal(err)
		}
		wait := time.Second
		if !fetchWait {
			wait = 100 * time.Millisecond // leaves a redelivery of an earlier event, if any, for later
		}
		batch, err := consumers[name].Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			meta, _ := m.Metadata()
			delivered := uint64(1)
			if meta != nil {
				delivered = meta.NumDelivered
			}
			var runID string
			runners[name].handle(ctx, m, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, 0, delivered, &runID)
		}
		if os.Getenv("FUZZ_DEBUG") != "" {
			e, _ := store.KV().Get(ctx, fuzzRunID)
			t.Logf("%s: %.300s", name, e.Value())
		}
	})
}
