package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directMax is how many messages ReadSubject asks the stream's leader for one by one before
// it reads the rest through a consumer. Most reads end within it (a run's outbox, the saga
// of a small run), and so create no consumer: a stream allows only so many, and a service
// that settles a thousand runs at once would otherwise hold a thousand.
const directMax = 64

// ReadSubject returns every event stored on stream under subject (wildcards allowed), in
// stream order, up to the last one the stream's leader holds when the read begins: on a
// cluster the reading consumer may sit on a replica still catching up, so the read goes on
// until it has seen the leader's last message, not until the replica says it is done.
// Messages that do not decode are skipped: the services that consume them refuse them on
// cairn.rejected, and a reader of history must not stop at them.
//
// The first messages are asked of the leader one at a time (the next under subject after
// the last one read); a longer history is read on through an ordered consumer.
func ReadSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) ([]Event, error) {
	stored, err := ReadStored(ctx, js, stream, subject)
	if err != nil || len(stored) == 0 {
		return nil, err
	}
	out := make([]Event, len(stored))
	for i, m := range stored {
		out[i] = m.Event
	}
	return out, nil
}

// Stored is an event as its stream holds it: its sequence and the message, headers included
// (a reader that checks a signature needs both).
type Stored struct {
	Seq   uint64
	Msg   *nats.Msg
	Event Event
}

// ReadStored is ReadSubject with each event's sequence and message.
func ReadStored(ctx context.Context, js jetstream.JetStream, stream, subject string) ([]Stored, error) {
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
	var out []Stored
	next := uint64(1)
	for range directMax {
		m, err := st.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil // the rest went (limits) since the read began
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s on %s at sequence %d: %w", subject, stream, next, err)
		}
		out = appendDecoded(out, m.Sequence, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if m.Sequence >= last.Sequence {
			return out, nil
		}
		next = m.Sequence + 1
	}
	return readOn(ctx, js, stream, subject, next, last.Sequence, out)
}

// readOn reads the messages under subject from sequence from to last through an ordered
// consumer, which the server removes soon after the read.
func readOn(ctx context.Context, js jetstream.JetStream, stream, subject string, from, last uint64, out []Stored) ([]Stored, error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, InactiveThreshold: 15 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("reading %s on %s: %w", subject, stream, err)
	}
	for seen := from - 1; seen < last; {
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
			out = appendDecoded(out, seen, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		}
		if got > 0 {
			continue
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading %s on %s: stopped at sequence %d of %d: %w", subject, stream, seen, last, err)
		}
		if meta, err := m.Metadata(); err == nil {
			seen = meta.Sequence.Stream
		}
		out = appendDecoded(out, seen, &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	}
	return out, nil
}

// appendDecoded appends m's event, or nothing when m is not one.
func appendDecoded(out []Stored, seq uint64, m *nats.Msg) []Stored {
	if e, err := Decode(m); err == nil {
		return append(out, Stored{Seq: seq, Msg: m, Event: e})
	}
	return out
}
