package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
)

// A message on a subject of a work-queue stream that no consumer filters (a verb no
// release knows, a step no pipeline has) is never delivered, so nothing ever settles it: it
// would stay forever, unseen. The unknown sweep finds such subjects, rejects each of their
// messages on cairn.rejected with its reason, and only then removes it from the stream.
//
// A subject is known when a consumer this release defines on the stream (assets.Config's,
// for the pipeline's steps) filters it, or a consumer that exists on the stream does (one a
// newer release made during a rolling upgrade): a message a consumer takes, or will take
// once its durable is made, is never removed. Each sweep costs one STREAM.INFO of each
// stream; the consumers are listed only when a subject looks unknown, and at most
// UnknownLimit messages are handled, the rest at the next sweep.

// runs is the space's CAIRN_RUNS.
func (s *Supervisor) runStream() string { return s.cfg.Space.Stream(assets.StreamRuns) }

// SweepUnknown rejects and removes up to UnknownLimit messages that no consumer of their
// stream would ever take, and returns how many it removed.
func (s *Supervisor) SweepUnknown(ctx context.Context) (int, error) {
	defined := map[string][]string{} // stream -> filters of this release's consumers
	for _, c := range (assets.Config{Space: s.cfg.Space, Steps: s.cfg.Pipeline.Names()}).Consumers() {
		defined[c.Stream] = append(defined[c.Stream], filtersOf(c.Config)...)
	}
	n := 0
	var errs []error
	for _, name := range []string{s.runStream(), s.cfg.Space.Stream(assets.StreamSteps)} {
		done, err := s.sweepUnknownOn(ctx, name, defined[name], s.cfg.UnknownLimit-n)
		n += done
		if err != nil {
			errs = append(errs, fmt.Errorf("sweeping %s for unknown subjects: %w", name, err))
		}
		if n >= s.cfg.UnknownLimit {
			break
		}
	}
	return n, errors.Join(errs...)
}

func (s *Supervisor) sweepUnknownOn(ctx context.Context, name string, defined []string, budget int) (int, error) {
	if budget <= 0 {
		return 0, nil
	}
	st, err := s.queue(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return 0, fmt.Errorf("reading its subjects: %w", err)
	}
	var unknown []string
	for subj := range info.State.Subjects {
		if !matchesAny(defined, subj) {
			unknown = append(unknown, subj)
		}
	}
	if len(unknown) == 0 {
		return 0, nil
	}
	existing, err := consumerFilters(ctx, st)
	if err != nil {
		return 0, err
	}
	unknown = slices.DeleteFunc(unknown, func(subj string) bool { return matchesAny(existing, subj) })
	slices.Sort(unknown)
	n := 0
	for _, subj := range unknown {
		seq := info.State.FirstSeq
		for left := info.State.Subjects[subj]; left > 0 && n < budget; left-- {
			m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break // none left on subj (another supervisor may have removed them)
			}
			if err != nil {
				return n, fmt.Errorf("reading a message on %s: %w", subj, err)
			}
			if err := s.rejectUnknown(ctx, st, name, m); err != nil {
				return n, err
			}
			n, seq = n+1, m.Sequence+1
		}
	}
	return n, nil
}

// rejectUnknown records m's rejection, then removes it: a crash between the two leaves it
// for the next sweep, whose rejection has the same id (<stream>:<seq>), deduplicated within
// CAIRN_REJECTED's two-minute window.
func (s *Supervisor) rejectUnknown(ctx context.Context, st jetstream.Stream, stream string, m *jetstream.RawStreamMsg) error {
	runID, reason := unknownReason(s.cfg.Space, stream, m.Subject)
	nm := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
	if err := s.audit.Reject(ctx, events.RejectedID(stream, m.Sequence), runID, events.NewRejected(stream, m.Sequence, nm, reason)); err != nil {
		return fmt.Errorf("recording the rejection of %s #%d: %w", stream, m.Sequence, err)
	}
	if err := st.DeleteMsg(ctx, m.Sequence); err != nil {
		// Gone already (another supervisor removed it) is what we wanted; it is read again otherwise.
		if _, gone := st.GetMsg(ctx, m.Sequence); !errors.Is(gone, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("removing %s #%d: %w", stream, m.Sequence, err)
		}
	}
	if stream == s.runStream() {
		s.cfg.Metrics.Commands.WithLabelValues("unknown", "rejected").Inc()
	}
	s.log.Warn("message on an unknown subject rejected and removed", slog.String("stream", stream), slog.Uint64("seq", m.Sequence),
		slog.String("subject", m.Subject), slog.String("reason", reason))
	return nil
}

// unknownReason says why no consumer takes subject, and the run it names (checked by
// audit.Reject, which names none for an id that is not one).
func unknownReason(sp assets.Space, stream, subject string) (runID, reason string) {
	if rest, ok := strings.CutPrefix(subject, sp.RunsPrefix()); ok && stream == sp.Stream(assets.StreamRuns) {
		if run, verb, two := strings.Cut(rest, "."); two && !strings.Contains(verb, ".") {
			return run, fmt.Sprintf("unknown verb %q: no consumer of %s takes %s", verb, stream, subject)
		}
	}
	if rest, ok := strings.CutPrefix(subject, sp.StepPrefix()); ok && stream == sp.Stream(assets.StreamSteps) {
		if step, run, two := strings.Cut(rest, "."); two && !strings.Contains(run, ".") {
			return run, fmt.Sprintf("no step %q in the pipeline: no consumer of %s takes %s", step, stream, subject)
		}
	}
	return "", fmt.Sprintf("no consumer of %s takes %s", stream, subject)
}

// queue returns the stream's handle, looked up once (the lookup is a STREAM.INFO of its own).
func (s *Supervisor) queue(ctx context.Context, name string) (jetstream.Stream, error) {
	s.mu.Lock()
	st, ok := s.queues[name]
	s.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.cfg.JS.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("looking up the stream: %w", err)
	}
	s.mu.Lock()
	s.queues[name] = st
	s.mu.Unlock()
	return st, nil
}

// consumerFilters lists the filters of every consumer on the stream.
func consumerFilters(ctx context.Context, st jetstream.Stream) ([]string, error) {
	l := st.ListConsumers(ctx)
	var out []string
	for ci := range l.Info() {
		out = append(out, filtersOf(ci.Config)...)
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("listing its consumers: %w", err)
	}
	return out, nil
}

// filtersOf is what a consumer takes; one with no filter takes every subject.
func filtersOf(c jetstream.ConsumerConfig) []string {
	out := slices.Clone(c.FilterSubjects)
	if c.FilterSubject != "" {
		out = append(out, c.FilterSubject)
	}
	if len(out) == 0 {
		out = []string{">"}
	}
	return out
}

func matchesAny(filters []string, subject string) bool {
	return slices.ContainsFunc(filters, func(f string) bool { return subjectMatches(f, subject) })
}

// subjectMatches reports whether a literal subject matches a NATS filter (* is one token,
// > the rest, at least one).
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}
