package audit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/events"
)

// An attempt records what it did on its run's timeline, in a batch it waits for before
// acknowledging its message; a second attempt that records the same items again (after a
// crash) adds nothing, for each event's id is its Nats-Msg-Id. A refused input goes on
// cairn.rejected with its reason.
func ExampleBatch() {
	dir, _ := os.MkdirTemp("", "audit-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	assets.Ensure(ctx, js, assets.Config{Steps: []string{"extract"}})

	clock := func() time.Time { return time.Date(2026, 10, 13, 22, 5, 0, 0, time.UTC) }
	p := audit.New(js, "extract", clock)
	for range 2 { // the first attempt, then its redelivery after a crash
		b := p.Batch()
		for _, doc := range []string{"inv-001", "inv-002"} {
			b.Record(events.AuditItemID("run-7", "extract", "extractor.called", 4, doc, 0),
				events.Audit{RunID: "run-7", Step: "extract", Event: "extractor.called", Token: 4, Item: doc})
		}
		fmt.Println("batch stored:", b.Wait(ctx))
	}
	p.Record(ctx, events.AuditStepID("run-7", "extract", "step.verified", 9),
		events.Audit{RunID: "run-7", Step: "extract", Event: "step.verified"})
	bad := &nats.Msg{Subject: "cairn.runs.start", Data: []byte("not json")}
	p.Reject(ctx, events.RejectedID(assets.StreamRuns, 3), "", events.NewRejected(assets.StreamRuns, 3, bad, "start: body is not a JSON object"))

	timeline, _ := events.ReadSubject(ctx, js, assets.StreamAudit, events.AuditSubject("run-7"))
	for _, e := range timeline {
		var a events.Audit
		e.Unmarshal(&a)
		line := e.Source + " " + e.Time.Format(time.TimeOnly) + " " + a.Event
		if a.Item != "" {
			line += " " + a.Item
		}
		fmt.Println(line)
	}
	refused, _ := events.ReadSubject(ctx, js, assets.StreamRejected, assets.Default.Rejected())
	for _, e := range refused {
		var r events.Rejected
		e.Unmarshal(&r)
		fmt.Println(e.ID, e.Subject, r.Subject, r.Data, "-", r.Reason)
	}
	// Output:
	// batch stored: <nil>
	// batch stored: <nil>
	// /cairn/extract 22:05:00 extractor.called inv-001
	// /cairn/extract 22:05:00 extractor.called inv-002
	// /cairn/extract 22:05:00 step.verified
	// CAIRN_RUNS:3 none cairn.runs.start not json - start: body is not a JSON object
}
