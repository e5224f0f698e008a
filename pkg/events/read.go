package events

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadSubject returns every event stored on stream under subject (wildcards allowed), in
// stream order. Messages that do not decode are skipped: the services that consume them
// refuse them on cairn.rejected, and a reader of history must not stop at them.
func ReadSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) ([]Event, error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
	}
	var out []Event
	for left := int(info.NumPending); left > 0; {
		batch, err := cons.Fetch(left, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if e, err := Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}); err == nil {
				out = append(out, e)
			}
		}
		if got == 0 {
			return nil, fmt.Errorf("reading %s on %s: %d stored messages did not arrive: %v", subject, stream, left, batch.Error())
		}
		left -= got
	}
	return out, nil
}
