package events_test

import (
	"fmt"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/nats-io/nats.go"
)

// A step event travels as ce-* headers plus a JSON body; its id is also the
// Nats-Msg-Id that JetStream deduplicates on.
func ExampleEncode() {
	at := time.Date(2026, 10, 13, 22, 0, 3, 0, time.UTC)
	e, err := events.New(events.StepReadyID("run-2026-10-13-ldh", "fetch", 1), events.TypeStepReady,
		"/cairn/supervisor", "run-2026-10-13-ldh", at,
		events.StepReady{RunID: "run-2026-10-13-ldh", Step: "fetch"})
	if err != nil {
		panic(err)
	}
	m, err := events.Encode(events.StepSubject("fetch", "run-2026-10-13-ldh"), e)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Subject)
	fmt.Println(m.Header.Get("Nats-Msg-Id"))
	fmt.Println(m.Header.Get("ce-type"), m.Header.Get("ce-time"))
	fmt.Println(string(m.Data))
	// Output:
	// cairn.step.fetch.run-2026-10-13-ldh
	// run-2026-10-13-ldh:fetch:ready:1
	// io.cairn.step.ready.v1 2026-10-13T22:00:03Z
	// {"run_id":"run-2026-10-13-ldh","step":"fetch","generation":0}
}

// A plain `nats pub` of an empty body on cairn.runs.<run_id>.approve arrives
// without CloudEvent headers; DecodeCommand makes it an approve command.
func ExampleDecodeCommand() {
	m := &nats.Msg{Subject: "cairn.runs.run-2026-10-13-ldh.approve"}
	e, err := events.DecodeCommand(assets.Default, m, "seq-12")
	if err != nil {
		panic(err)
	}
	var c events.Command
	if err := e.Unmarshal(&c); err != nil {
		panic(err)
	}
	fmt.Println(e.Type, e.ID, e.Subject, e.Source, string(e.Data))
	// Output:
	// io.cairn.run.approve.v1 seq-12 run-2026-10-13-ldh /nats-cli {}
}
