package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// The supervisor of pipeline enrich turns a start into a run: it claims the run's input,
// creates its record and sends the first step its event. A second start of the same input
// under another run id is refused, naming the run that holds it.
func ExampleSupervisor_Run() {
	dir, _ := os.MkdirTemp("", "supervisor-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	d := pipeline.Definition{Name: "enrich", Input: []string{"date"}, NaturalKey: "the date", Steps: []pipeline.Step{
		{Name: "fetch", Kind: pipeline.SourceRead, Leased: true},
		{Name: "classify", Kind: pipeline.Compute},
	}}
	sp := assets.MustSpace(d.Name)
	assets.Ensure(ctx, js, assets.Config{Space: sp, Steps: d.Names()})
	store, _ := kc.Open(ctx, js, sp.Bucket(assets.BucketRuns))
	bucket := func(base string) jetstream.KeyValue { kv, _ := js.KeyValue(ctx, sp.Bucket(base)); return kv }
	s, err := supervisor.New(supervisor.Config{JS: js, Store: store, Pipeline: d, Space: sp,
		Marks: bucket(assets.BucketOutbox), Handovers: bucket(assets.BucketHandovers), NaturalKeys: bucket(assets.BucketNaturalKeys)})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Ready()

	js.Publish(ctx, sp.RunStart(), []byte(`{"run_id":"run-7","date":"2026-10-13"}`))
	next := func(stream, durable string) jetstream.Msg { // what a worker pulls
		c, _ := js.Consumer(ctx, stream, durable)
		m, _ := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		return m
	}
	m := next(sp.Stream(assets.StreamSteps), "fetch")
	fmt.Println("fetch's worker receives", m.Subject())
	rec, _, _ := store.Load(ctx, "run-7")
	fmt.Println("run-7:", rec.Status, "fetch", rec.Step("fetch").Status)

	js.Publish(ctx, sp.RunStart(), []byte(`{"run_id":"run-8","date":"2026-10-13"}`))
	rc, _ := js.OrderedConsumer(ctx, sp.Stream(assets.StreamRejected), jetstream.OrderedConsumerConfig{})
	rm, _ := rc.Next(jetstream.FetchMaxWait(10 * time.Second))
	e, _ := events.Decode(&nats.Msg{Subject: rm.Subject(), Header: rm.Headers(), Data: rm.Data()})
	var r events.Rejected
	e.Unmarshal(&r)
	reason, _, _ := strings.Cut(r.Reason, ":")
	fmt.Println("refused:", reason)
	_, _, err = store.Load(ctx, "run-8")
	fmt.Println("run-8:", errors.Is(err, kc.ErrNotFound))

	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// fetch's worker receives cairn.enrich.step.fetch.run-7
	// run-7: running fetch pending
	// refused: run run-7 has this input already (date 2026-10-13)
	// run-8: true
	// stopped: <nil>
}
