package app

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// refusal is a refused start, as the supervisor recorded it on the space's rejected subject.
type refusal struct {
	runID     string
	requestID string // the refused start's, "" when neither its headers nor its body say
	reason    string
	at        time.Time
	params    *kc.Params // the refused start's input, nil when its body could not be read
}

func (r refusal) refused(holder string) *Refused {
	return &Refused{RunID: r.runID, Holder: holder, Reason: r.reason, At: r.at}
}

// followRefusals follows the refusals of starts of run runID on space sp's rejected stream
// st, from stream sequence from on, and sends those match keeps: first the latest of the
// ones stored, once it has read up to the stream's end, then each new one. The stream is
// read headers only; only a refusal about runID (its ce-subject) is read whole. stop ends
// the follower.
func followRefusals(ctx context.Context, js jetstream.JetStream, sp assets.Space, st jetstream.Stream, runID string, from uint64, match func(refusal) bool) (<-chan refusal, func(), error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{sp.Rejected()}, HeadersOnly: true, InactiveThreshold: 15 * time.Second}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	name := sp.Stream(assets.StreamRejected)
	cons, err := js.OrderedConsumer(ctx, name, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the refusals on %s: %w", name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan refusal, 1)
	var latest *refusal // the callback runs one message at a time
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		if about := m.Headers().Values("ce-subject"); len(about) == 0 || about[0] == runID {
			if r, ok := readRefusal(ctx, st, sp, meta.Sequence.Stream); ok && r.runID == runID && match(r) {
				latest = &r
			}
		}
		if latest != nil && meta.NumPending == 0 {
			select {
			case out <- *latest:
				latest = nil
			case <-ctx.Done():
			}
		}
	})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("reading the refusals on %s: %w", name, err)
	}
	stop := func() {
		cancel()
		cc.Stop()
		select { // bounded: the callback returns once ctx is cancelled
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
		}
	}
	return out, stop, nil
}

// readRefusal reads the refusal at seq of the rejected stream st; ok false when it is not
// the refusal of a start of sp.
func readRefusal(ctx context.Context, st jetstream.Stream, sp assets.Space, seq uint64) (refusal, bool) {
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		return refusal{}, false
	}
	e, err := events.Decode(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil || e.Type != events.TypeRejected {
		return refusal{}, false
	}
	var r events.Rejected
	if e.Unmarshal(&r) != nil || r.Subject != sp.RunStart() {
		return refusal{}, false
	}
	out := refusal{runID: e.Subject, reason: r.Reason, at: e.Time}
	for _, k := range []string{"ce-id", "Ce-Id", jetstream.MsgIDHeader} {
		if v := r.Headers[k]; len(v) > 0 && out.requestID == "" {
			out.requestID = v[0]
		}
	}
	var c events.StartCommand // the body, unless it was cut to events.MaxRejectedData
	if json.Unmarshal([]byte(r.Data), &c) == nil {
		out.params = &kc.Params{Input: c.Params, Shadow: c.Shadow}
		if out.requestID == "" {
			out.requestID = c.RequestID
		}
	}
	return out, true
}

// holderOf is the run that holds input params in space sp, as the claim on its natural key
// says (package supervisor), or "" when it cannot be read: the night's definition is not
// registered, or the claim is missing or names runID itself.
func holderOf(ctx context.Context, js jetstream.JetStream, sp assets.Space, runID string, params kc.Params) string {
	if sp.IsDefault() {
		return ""
	}
	reg, err := Registered(ctx, js, sp.Name())
	if err != nil {
		return ""
	}
	kv, err := js.KeyValue(ctx, sp.Bucket(assets.BucketNaturalKeys))
	if err != nil {
		return ""
	}
	natural := supervisor.NaturalKey(reg.Definition(), params)
	e, err := kv.Get(ctx, supervisor.NaturalKeyEntry(natural))
	if err != nil {
		return ""
	}
	var c supervisor.Claim
	if json.Unmarshal(e.Value(), &c) != nil || c.NaturalKey != natural || c.RunID == runID {
		return ""
	}
	return c.RunID
}
