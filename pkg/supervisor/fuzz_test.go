package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// nightSteps are the reference night's steps as the fuzzed records carry them (the
// definition lives in internal/night, which imports this package).
var nightSteps = pipeline.Definition{Name: "night", Steps: []pipeline.Step{
	{Name: "fetch", Kind: pipeline.SourceRead, Leased: true},
	{Name: "extract", Kind: pipeline.ModelCall, Leased: true, Effects: "model call"},
	{Name: "match", Kind: pipeline.Compute},
	{Name: "compare", Kind: pipeline.SnapshotRead, Leased: true},
	{Name: "post-ledger", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "ledger rows"},
	{Name: "update-stock", Kind: pipeline.BusinessWrite, Leased: true, Fenced: true, Effects: "stock adjustments"},
	{Name: "debit-notes", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Effects: "mail"},
	{Name: "report", Kind: pipeline.OutsideMessage, Leased: true, Irreversible: true, Effects: "mail"},
}}

// fuzzRun is the key every fuzzed record is stored under.
const fuzzRun = "run-2026-10-13-ldh"

var fuzzVerbs = []string{events.VerbStart, events.VerbCancel, events.VerbResume, events.VerbRerun, events.VerbApprove, events.VerbReject, events.VerbUndo}

// seedRecords are records as Cairn writes them, in every status and with every optional
// part, and the schema 1 record of an earlier release.
func seedRecords(tb testing.TB) [][]byte {
	tb.Helper()
	at := "2026-10-13T22:00:00Z"
	base := func() *kc.Record { return kc.New(fuzzRun, ldh, nightSteps.Names(), at) }
	var recs []*kc.Record
	recs = append(recs, base())
	for _, st := range []kc.Status{kc.Running, kc.Finishing, kc.HandedOver, kc.Done, kc.Undoing, kc.Undone, kc.Cancelled} {
		r := base()
		r.Status = st
		for _, s := range r.Pipeline[:4] {
			r.Step(s).Status = kc.Verified
			r.Step(s).Effects = &kc.Effects{Keys: 3}
		}
		r.Step("post-ledger").Status = kc.InProgress
		recs = append(recs, r)
	}
	leased := base()
	leased.Lease = &kc.Lease{Owner: "fetch/h/1", OwnerInbox: "cairn.owner.fetch.x", Token: 1, Step: "fetch", WriteID: "w1"}
	leased.Step("fetch").Status = kc.InProgress
	leased.Progress = &kc.Progress{Step: "fetch", Count: 2, NoProgress: 1}
	recs = append(recs, leased)
	waiting := base()
	waiting.Status = kc.WaitingApproval
	waiting.Approval = &kc.Approval{Step: "debit-notes", PlanDigest: "sha256:ab", Since: at}
	recs = append(recs, waiting)
	approved := base()
	approved.Approval = &kc.Approval{Step: "debit-notes", PlanDigest: "sha256:ab", Since: at, By: kc.Ptr("ops"), At: kc.Ptr(at)}
	recs = append(recs, approved)
	undoing := base()
	undoing.Status = kc.Undoing
	undoing.Lease = &kc.Lease{Owner: "compensator/h/1", OwnerInbox: "cairn.owner.compensator.x", Token: 4, Step: kc.UndoLease, WriteID: "w2"}
	undoing.Undo = &kc.Undo{RequestID: "u-1", Scope: json.RawMessage(`{"supplier":"SUP-07"}`), Cursor: 1, Reversed: 1, Total: 3, PreviousStatus: kc.Done}
	recs = append(recs, undoing)
	waits := base()
	waits.Status = kc.Cancelled
	waits.Lease = &kc.Lease{Owner: "post-ledger/h/1", OwnerInbox: "cairn.owner.post-ledger.x", Token: 9, Step: "post-ledger", WriteID: "w3"}
	waits.Commands = []kc.Command{{Verb: events.VerbResume, RequestID: "r-1", By: "ops", At: at}, {Verb: events.VerbUndo, RequestID: "u-2", By: "ops", At: at, Args: json.RawMessage(`{"scope":{"step":"post-ledger"}}`)}}
	recs = append(recs, waits)
	var out [][]byte
	for _, r := range recs {
		r.Epoch = "fuzz"
		b, err := json.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	if b, err := os.ReadFile("../kvcheckpoint/testdata/schema1.json"); err == nil {
		out = append(out, b)
	} else {
		tb.Fatal(err)
	}
	return out
}

var seedCommands = []string{
	``, `{}`, `{"request_id":"r-9"}`, `{"after_fix":true}`, `{"from":"post-ledger"}`, `{"from":"fetch"}`,
	`{"by":"ops"}`, `{"scope":{"supplier":"SUP-07"}}`, `{"scope":{"step":"update-stock"}}`,
	`{"run_id":"run-2026-10-13-ldh","warehouse":"ldh","date":"2026-10-13"}`,
}

// FuzzSupervisor drives the supervisor's commands and sweeps over arbitrary records that
// decode (their sum made as the code makes it, so only the invariants stand between a
// forged record and the code) and arbitrary commands: none may panic. The calls are the
// unguarded ones, below the recover of Handle and of the sweep.
func FuzzSupervisor(f *testing.F) {
	for i, rec := range seedRecords(f) {
		for j, cmd := range seedCommands {
			if (i+j)%3 == 0 {
				f.Add(rec, uint8(j), []byte(cmd), uint16(i*37), i%2 == 0)
			}
		}
	}
	fx := setup(f)
	fx.ctx = context.Background() // setup's bound is a test's, not a fuzzing run's
	fx.store = must(kc.Open(fx.ctx, fx.js, assets.BucketRuns, kc.WithPipeline(nightSteps.Names())))
	if err := assets.Ensure(fx.ctx, fx.js, assets.Config{Steps: nightSteps.Names()}); err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{
		JS: fx.js, Store: fx.store, Marks: fx.marks, Handovers: fx.notes, NaturalKeys: fx.natural, Pipeline: nightSteps,
		Lease: testLease, StallTimeout: testStall, ReassignLimit: testReassignLimit, TakeoverGap: 10 * time.Millisecond,
		Now: fx.clock.Now,
	})
	if err != nil {
		f.Fatal(err)
	}
	n := 0
	f.Fuzz(func(t *testing.T, record []byte, verb uint8, body []byte, minutes uint16, startup bool) {
		n++
		var rec kc.Record
		if json.Unmarshal(record, &rec) != nil {
			return
		}
		rec.RunID, rec.Epoch = fuzzRun, fx.store.Epoch()
		b, err := kc.Encode(&rec)
		if err != nil {
			return
		}
		if _, err := fx.store.KV().Put(fx.ctx, fuzzRun, b); err != nil {
			t.Fatal(err)
		}
		e, err := fx.store.KV().Get(fx.ctx, fuzzRun)
		if err != nil {
			t.Fatal(err)
		}
		s.observe(e)
		fx.clock.Advance(time.Duration(minutes) * time.Minute)
		v := fuzzVerbs[int(verb)%len(fuzzVerbs)]
		subject := events.RunSubject(fuzzRun, v)
		if v == events.VerbStart {
			subject = events.RunStartSubject
		}
		if ev, err := events.DecodeCommand(assets.Default, &nats.Msg{Subject: subject, Data: body}, fmt.Sprintf("seq-%d", n)); err == nil && v != events.VerbUndo {
			_ = s.apply(fx.ctx, ev)
		}
		if e, err := fx.store.KV().Get(fx.ctx, fuzzRun); err == nil {
			s.observe(e)
		}
		s.mu.Lock()
		w, ok := s.runs[fuzzRun]
		s.mu.Unlock()
		if ok {
			s.sweepWatched(fx.ctx, w, startup)
		}
		s.noteUntrusted(fx.ctx)
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
