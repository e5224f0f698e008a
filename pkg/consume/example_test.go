package consume_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/consume"
)

// A worker's loop: it handles messages until its context ends (nil), or ends with
// ErrEnded when its durable is deleted under it, and the process should then exit non-zero.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "consume-example")
	defer os.RemoveAll(dir)
	s, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	s.Start()
	defer s.Shutdown()
	s.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(s.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}})
	cons, _ := js.CreateConsumer(ctx, "WORK", jetstream.ConsumerConfig{Durable: "step", AckPolicy: jetstream.AckExplicitPolicy})

	handled := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- consume.Run(ctx, cons, func(m jetstream.Msg) {
			_ = m.Ack()
			close(handled)
		})
	}()
	_, _ = js.Publish(ctx, "work.1", []byte("job"))
	<-handled
	_ = js.DeleteConsumer(ctx, "WORK", "step")
	err := <-done
	fmt.Println("ended:", errors.Is(err, consume.ErrEnded))
	// Output: ended: true
}
