//go:build linux

package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// unknownLimit is how long the test waits for the unknown sweep (every 10s by default) to
// reject and remove a message.
const unknownLimit = 2 * time.Minute

// An operator with the NATS CLI (admin, on the deploy configuration) publishes a verb no
// consumer takes and a step event for a step the pipeline lacks, while a night runs: both
// are rejected on cairn.rejected with their stream, sequence, subject and reason, and
// removed from their work queue, by the supervisor under its own user (the server refuses
// it nothing); the night finishes as the truth says.
func TestUntrustedUnknownSubjects(t *testing.T) {
	t.Parallel()
	bin := natsCLI(t)
	takeDeployNightSlot(t)
	d := newDeployNight(t)
	d.cliEnv = append(d.cliEnv, "NATS_CA="+d.ca) // the CLI's --tlsca: the deploy server speaks TLS only
	d.services(allBut()...)
	d.startRun()

	verb := events.RunSubject(runID, "frobnicate")
	stray := events.StepSubject("nosuchstep", runID)
	d.natsRun(bin, "pub", "--jetstream", verb, `{"by":"ops"}`)
	d.natsRun(bin, "pub", "--jetstream", stray, `{}`)

	for _, c := range []struct{ stream, subject, reason, data string }{
		{assets.StreamRuns, verb, `unknown verb "frobnicate"`, `{"by":"ops"}`},
		{assets.StreamSteps, stray, `no step "nosuchstep" in the pipeline`, `{}`},
	} {
		var seq uint64
		if !poll(unknownLimit, func() bool {
			d.assertNoneRefused()
			seq = d.rejectionOn(c.subject)
			return seq != 0
		}) {
			t.Fatalf("no rejection of %s on %s within %s", c.subject, events.RejectedSubject, unknownLimit)
		}
		r := d.rejectedByCLI(bin, seq)
		if r.Stream != c.stream || r.Seq == 0 || r.Subject != c.subject || r.Data != c.data || !strings.HasPrefix(r.Reason, c.reason) {
			t.Errorf("rejection of %s (nats stream get): %+v; want stream %s, its sequence, the body and the reason %s", c.subject, r, c.stream, c.reason)
		}
		if held := d.held(c.stream, c.subject); held != 0 {
			t.Errorf("%s still holds %d messages on %s after their rejection", c.stream, held, c.subject)
		}
		if _, err := d.streamOf(c.stream).GetMsg(context.Background(), r.Seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("%s #%d: %v, want it removed", c.stream, r.Seq, err)
		}
	}

	d.waitRun("done", func(r *kc.Record) bool { return r.Status == kc.Done })
	d.assertTruth()
	d.assertNoneRefused()
	for _, s := range []string{assets.StreamRuns, assets.StreamSteps} {
		if held := d.held(s, ">"); held != 0 {
			t.Errorf("%s holds %d messages after a finished night, want none", s, held)
		}
	}
}

func (d *deployNight) streamOf(name string) jetstream.Stream {
	d.t.Helper()
	st, err := d.js.Stream(context.Background(), name)
	if err != nil {
		d.t.Fatal(err)
	}
	return st
}

// held counts the messages stream holds on subjects matching filter.
func (d *deployNight) held(stream, filter string) uint64 {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := d.streamOf(stream).Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		d.t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// rejectionOn returns the stream sequence on CAIRN_REJECTED of the first rejection of a
// message on subject, or 0 when there is none.
func (d *deployNight) rejectionOn(subject string) uint64 {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := d.streamOf(assets.StreamRejected)
	info, err := st.Info(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq != 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			d.t.Fatal(err)
		}
		e, err := events.Decode(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			continue
		}
		var r events.Rejected
		if e.Unmarshal(&r) == nil && r.Subject == subject {
			return seq
		}
	}
	return 0
}
