package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadSubject returns every event stored on stream under subject (wildcards allowed), in
// stream order, up to the last one the stream's leader holds when the read begins: on a
// cluster the reading consumer may sit on a replica still catching up, so the read goes on
// until it has seen the leader's last message, not until the replica says it is done.
// Messages that do not decode are skipped: the services that consume them refuse them on
// cairn.rejected, and a reader of history must not stop at them.
func ReadSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) ([]Event, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
	}
	last, err := st.GetLastMsgForSubject(ctx, subject) // answered by the leader
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
	}
	// The reader's consumer goes away soon after the read: a stream allows only so many.
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, InactiveThreshold: 15 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
	}
	var out []Event
	for seen := uint64(0); seen < last.Sequence; {
		// What is there now, at once; when nothing is yet, wait a little for the next.
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if meta, err := m.Metadata(); err == nil {
				seen = meta.Sequence.Stream
			}
			if e, err := Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}); err == nil {
				out = append(out, e)
			}
		}
		if got > 0 {
			continue
		}
		next, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading %s on %s: stopped at sequence %d of %d: %w", subject, stream, seen, last.Sequence, err)
		}
		if meta, err := next.Metadata(); err == nil {
			seen = meta.Sequence.Stream
		}
		if e, err := Decode(&nats.Msg{Subject: next.Subject(), Header: next.Headers(), Data: next.Data()}); err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}
