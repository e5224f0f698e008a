package supervisor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
)

// subjectsOf returns the subjects stream holds messages on, with their counts.
func (f *fixture) subjectsOf(t *testing.T, stream string) map[string]uint64 {
	t.Helper()
	st, err := f.js.Stream(f.ctx, stream)
	if err != nil {
		t.Fatalf("looking up %s: %v", stream, err)
	}
	info, err := st.Info(f.ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatalf("%s info: %v", stream, err)
	}
	if info.State.Subjects == nil {
		return map[string]uint64{}
	}
	return info.State.Subjects
}

// rejectionOf returns the rejection of stream's message seq, or fails.
func rejectionOf(t *testing.T, rs []rejected, stream string, seq uint64) rejected {
	t.Helper()
	for _, r := range rs {
		if r.event.ID == events.RejectedID(stream, seq) {
			return r
		}
	}
	t.Fatalf("no rejection of %s #%d among %d", stream, seq, len(rs))
	return rejected{}
}

// Messages on subjects no consumer takes (a verb no one knows, a verb on the wrong shape of
// subject, a step the pipeline lacks) are rejected with their reason, then removed; the
// messages every consumer takes stay where they are, untouched.
func TestSweepUnknownRejectsAndRemoves(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	frob := f.send(t, "cairn.runs.R1.frobnicate", `{}`)
	startVerb := f.send(t, "cairn.runs.R1.start", `{"run_id":"R1"}`)
	nostep := f.send(t, "cairn.step.nosuchstep.R1", `{}`)
	badID := f.send(t, "cairn.step.zz.bad!id", `x`)
	known := []string{"cairn.runs.start", "cairn.runs.R2.cancel", "cairn.runs.R2.undo", "cairn.runs.R2.approve", "cairn.step.a.R2", "cairn.step.c.R3"}
	for _, subj := range known {
		f.send(t, subj, `{}`)
	}

	n, err := s.SweepUnknown(f.ctx)
	if err != nil || n != 4 {
		t.Fatalf("SweepUnknown: %d, %v; want 4 removed", n, err)
	}
	held := f.subjectsOf(t, assets.StreamRuns)
	for subj, c := range f.subjectsOf(t, assets.StreamSteps) {
		held[subj] = c
	}
	want := map[string]uint64{}
	for _, subj := range known {
		want[subj] = 1
	}
	if fmt.Sprint(held) != fmt.Sprint(want) {
		t.Fatalf("the work queues hold %v, want %v", held, want)
	}

	rs := f.rejections(t)
	if len(rs) != 4 {
		t.Fatalf("%d rejections, want 4", len(rs))
	}
	cases := []struct {
		stream, subject, runID, reason, data string
		seq                                  uint64
	}{
		{assets.StreamRuns, "cairn.runs.R1.frobnicate", "R1", `unknown verb "frobnicate"`, `{}`, frob},
		{assets.StreamRuns, "cairn.runs.R1.start", "R1", `unknown verb "start"`, `{"run_id":"R1"}`, startVerb},
		{assets.StreamSteps, "cairn.step.nosuchstep.R1", "R1", `no step "nosuchstep" in the pipeline`, `{}`, nostep},
		{assets.StreamSteps, "cairn.step.zz.bad!id", "none", `no step "zz" in the pipeline`, `x`, badID},
	}
	for _, c := range cases {
		r := rejectionOf(t, rs, c.stream, c.seq)
		if r.data.Stream != c.stream || r.data.Seq != c.seq || r.data.Subject != c.subject || r.data.Data != c.data ||
			!strings.HasPrefix(r.data.Reason, c.reason) || r.event.Subject != c.runID || r.event.Source != source {
			t.Errorf("rejection of %s: event %+v, data %+v; want subject %s, run %s, reason %s", c.subject, r.event, r.data, c.subject, c.runID, c.reason)
		}
	}

	// Nothing left: a second sweep finds nothing and rejects nothing again.
	if n, err := s.SweepUnknown(f.ctx); err != nil || n != 0 {
		t.Fatalf("second SweepUnknown: %d, %v; want 0", n, err)
	}
	if rs := f.rejections(t); len(rs) != 4 {
		t.Fatalf("%d rejections after the second sweep, want 4", len(rs))
	}
}

// A sweep handles at most UnknownLimit messages; the rest wait for the next ones.
func TestSweepUnknownIsBounded(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	s.cfg.UnknownLimit = 2
	for i := range 5 {
		f.send(t, fmt.Sprintf("cairn.runs.R%d.frobnicate", i%2), `{}`)
	}
	var got []int
	for range 4 {
		n, err := s.SweepUnknown(f.ctx)
		if err != nil {
			t.Fatalf("SweepUnknown: %v", err)
		}
		got = append(got, n)
	}
	if !slices.Equal(got, []int{2, 2, 1, 0}) {
		t.Fatalf("removed %v by four sweeps, want [2 2 1 0]", got)
	}
	if held := f.subjectsOf(t, assets.StreamRuns); len(held) != 0 {
		t.Fatalf("CAIRN_RUNS holds %v, want nothing", held)
	}
}

// A step this supervisor's pipeline lacks but whose durable exists on the stream (a newer
// release's, during a rolling upgrade) is not unknown: its messages are left to it.
func TestSweepUnknownLeavesWhatAnExistingConsumerTakes(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	if _, err := f.js.CreateConsumer(f.ctx, assets.StreamSteps, jetstream.ConsumerConfig{
		Durable: "newstep", FilterSubject: "cairn.step.newstep.*", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatalf("creating the newer release's durable: %v", err)
	}
	if _, err := f.js.CreateConsumer(f.ctx, assets.StreamRuns, jetstream.ConsumerConfig{
		Durable: "newverb", FilterSubject: "cairn.runs.*.pause", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatalf("creating the newer release's durable: %v", err)
	}
	f.send(t, "cairn.step.newstep.R1", `{}`)
	f.send(t, "cairn.runs.R1.pause", `{}`)
	gone := f.send(t, "cairn.step.other.R1", `{}`)
	n, err := s.SweepUnknown(f.ctx)
	if err != nil || n != 1 {
		t.Fatalf("SweepUnknown: %d, %v; want 1 removed", n, err)
	}
	if held := f.subjectsOf(t, assets.StreamSteps); fmt.Sprint(held) != "map[cairn.step.newstep.R1:1]" {
		t.Fatalf("CAIRN_STEPS holds %v, want the newer step's message only", held)
	}
	if held := f.subjectsOf(t, assets.StreamRuns); fmt.Sprint(held) != "map[cairn.runs.R1.pause:1]" {
		t.Fatalf("CAIRN_RUNS holds %v, want the newer verb's message only", held)
	}
	rejectionOf(t, f.rejections(t), assets.StreamSteps, gone)
}

// Two supervisors sweeping the same messages reject each once and both succeed.
func TestSweepUnknownByTwoSupervisors(t *testing.T) {
	f := setup(t)
	sups := []*Supervisor{f.supervisor(t), f.other(t)}
	for range 20 {
		f.send(t, "cairn.step.nosuchstep.R1", `{}`)
	}
	errs := make(chan error, len(sups))
	for _, s := range sups {
		go func() {
			_, err := s.SweepUnknown(f.ctx)
			errs <- err
		}()
	}
	for range sups {
		if err := <-errs; err != nil {
			t.Fatalf("SweepUnknown: %v", err)
		}
	}
	if held := f.subjectsOf(t, assets.StreamSteps); len(held) != 0 {
		t.Fatalf("CAIRN_STEPS holds %v, want nothing", held)
	}
	if rs := f.rejections(t); len(rs) != 20 {
		t.Fatalf("%d rejections, want 20 (one each)", len(rs))
	}
}

// Run sweeps for unknown subjects on its own: the message is gone from the stream and its
// rejection is on cairn.rejected within a deadline.
func TestRunSweepsUnknownSubjects(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	s.cfg.UnknownSweep = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(f.ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-stopped
	}()
	<-s.Ready()
	seq := f.send(t, "cairn.runs.R1.frobnicate", `{}`)
	eventually.That(t, 20*time.Second, "CAIRN_RUNS swept", func() error {
		if subjects := f.subjectsOf(t, assets.StreamRuns); len(subjects) != 0 {
			return fmt.Errorf("CAIRN_RUNS still holds %v", subjects)
		}
		return nil
	})
	r := rejectionOf(t, f.rejections(t), assets.StreamRuns, seq)
	if r.data.Subject != "cairn.runs.R1.frobnicate" || !strings.HasPrefix(r.data.Reason, `unknown verb "frobnicate"`) {
		t.Fatalf("rejection %+v", r.data)
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{"cairn.runs.start", "cairn.runs.start", true},
		{"cairn.runs.*.undo", "cairn.runs.R1.undo", true},
		{"cairn.runs.*.undo", "cairn.runs.R1.cancel", false},
		{"cairn.runs.*.undo", "cairn.runs.undo", false},
		{"cairn.step.a.*", "cairn.step.a.R1", true},
		{"cairn.step.a.*", "cairn.step.ab.R1", false},
		{"cairn.step.a.*", "cairn.step.a.R1.x", false},
		{">", "cairn.step.a.R1", true},
		{"cairn.>", "cairn.step.a.R1", true},
		{"cairn.step.>", "cairn.step", false},
	} {
		if got := subjectMatches(c.filter, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.filter, c.subject, got, c.want)
		}
	}
}
