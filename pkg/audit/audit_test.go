package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/events"
)

// A batch's events are stored when Wait returns; a posted event when its ack comes, under
// its id, on the run's audit subject.
func TestBatchAndPost(t *testing.T) {
	ctx := context.Background()
	js := natstest.JetStream(t)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: []string{"s1"}}); err != nil {
		t.Fatal(err)
	}
	p := audit.New(js, "test", func() time.Time { return time.Date(2026, 10, 13, 22, 0, 0, 0, time.UTC) })
	b := p.Batch()
	for i := range 3 {
		b.Record(fmt.Sprintf("r1:s1:document.read:7:d%d:0", i), events.Audit{RunID: "r1", Step: "s1", Event: "document.read", Token: 7, Item: fmt.Sprintf("d%d", i)})
	}
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if evs, err := events.ReadSubject(ctx, js, assets.StreamAudit, events.AuditSubject("r1")); err != nil || len(evs) != 3 {
		t.Fatalf("%d events stored after Wait (%v), want 3", len(evs), err)
	}
	f, err := p.Post("r1:s1:step.verified:9", events.Audit{RunID: "r1", Step: "s1", Event: "step.verified", Token: 7})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-f.Ok():
		if ack.Stream != assets.StreamAudit || ack.Duplicate {
			t.Errorf("ack %+v, want a first store on %s", ack, assets.StreamAudit)
		}
	case err := <-f.Err():
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("no ack for the posted event within 30s")
	}
	evs, err := events.ReadSubject(ctx, js, assets.StreamAudit, events.AuditSubject("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 || evs[3].ID != "r1:s1:step.verified:9" || evs[3].Source != "/cairn/test" {
		t.Errorf("events %+v, want the 3 recorded then the posted one", evs)
	}
}

// A batch far larger than it keeps in hand (it drops what is already stored as it goes)
// still has every event stored when Wait returns.
func TestLargeBatch(t *testing.T) {
	ctx := context.Background()
	js := natstest.JetStream(t)
	if err := assets.Ensure(ctx, js, assets.Config{Steps: []string{"s1"}}); err != nil {
		t.Fatal(err)
	}
	p := audit.New(js, "test", nil)
	b := p.Batch()
	const n = 5000
	for i := range n {
		b.Record(fmt.Sprintf("r1:s1:document.read:7:d%d:0", i), events.Audit{RunID: "r1", Step: "s1", Event: "document.read", Token: 7, Item: fmt.Sprintf("d%d", i)})
	}
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, assets.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("%d audit events stored when Wait returned, want %d", info.State.Msgs, n)
	}
}
