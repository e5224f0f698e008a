package events_test

import (
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/events"
)

// stepEvent is a step event as the runner publishes it, with a trace context.
func stepEvent(b *testing.B) events.Event {
	b.Helper()
	e, err := events.New(events.StepReadyID("run-2026-10-13-ldh", "post-ledger", 1876), events.TypeStepReady, "/cairn/compare",
		"run-2026-10-13-ldh", time.Date(2026, 10, 13, 22, 0, 3, 0, time.UTC), events.StepReady{RunID: "run-2026-10-13-ldh", Step: "post-ledger", Generation: 0})
	if err != nil {
		b.Fatal(err)
	}
	e.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	return e
}

// BenchmarkEncode builds and encodes a step event: what the runner does to publish the next
// step.
func BenchmarkEncode(b *testing.B) {
	e := stepEvent(b)
	b.ReportAllocs()
	for b.Loop() {
		ev, err := events.New(e.ID, e.Type, e.Source, e.Subject, e.Time, events.StepReady{RunID: "run-2026-10-13-ldh", Step: "post-ledger"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := events.Encode(events.StepSubject("post-ledger", "run-2026-10-13-ldh"), ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode decodes and validates a step event and its data: the runner's point 1.
func BenchmarkDecode(b *testing.B) {
	m, err := events.Encode(events.StepSubject("post-ledger", "run-2026-10-13-ldh"), stepEvent(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		e, err := events.Decode(m)
		if err != nil {
			b.Fatal(err)
		}
		var ready events.StepReady
		if err := e.Unmarshal(&ready); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeAudit builds and encodes an audit event about a step (step.verified).
func BenchmarkEncodeAudit(b *testing.B) {
	a := events.Audit{RunID: "run-2026-10-13-ldh", Step: "post-ledger", Event: "step.verified", Token: 1876, Owner: "post-ledger/host-7/4188-a1b2c3"}
	at := time.Date(2026, 10, 13, 22, 0, 3, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		e, err := events.New(events.AuditStepID(a.RunID, a.Step, a.Event, 1877), events.TypeAudit, "/cairn/post-ledger", a.RunID, at, a)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := events.Encode(events.AuditSubject(a.RunID), e); err != nil {
			b.Fatal(err)
		}
	}
}
