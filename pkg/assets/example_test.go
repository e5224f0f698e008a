package assets_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
)

// cairn init makes a pipeline's assets with Ensure; each service checks them with Check at
// its start, and one that declares a step init has not made is refused, naming the asset.
func ExampleEnsure() {
	dir, _ := os.MkdirTemp("", "assets-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()

	_, err := assets.SpaceOf("runs")
	fmt.Println("a pipeline called runs:", errors.Is(err, assets.ErrReservedName))
	sp, _ := assets.SpaceOf("enrich")
	fmt.Println(sp.Stream(assets.StreamSteps), sp.Bucket(assets.BucketRuns), sp.Step("classify", "run-7"))

	cfg := assets.Config{Space: sp, Steps: []string{"fetch", "classify"}}
	fmt.Println("before init:", errors.Is(assets.Check(ctx, js, cfg), assets.ErrMissing))
	fmt.Println("init:", assets.Ensure(ctx, js, cfg))
	fmt.Println("a service starts:", assets.Check(ctx, js, cfg))

	cfg.Steps = append(cfg.Steps, "summarise")
	fmt.Println("a newer release starts:", assets.Check(ctx, js, cfg))
	// Output:
	// a pipeline called runs: true
	// CAIRN_ENRICH_STEPS cairn-enrich-runs cairn.enrich.step.classify.run-7
	// before init: true
	// init: <nil>
	// a service starts: <nil>
	// a newer release starts: consumer summarise on CAIRN_ENRICH_STEPS: asset missing
}
