package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/consume"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
	"github.com/cairnhq/cairn/pkg/metrics"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Config is what the supervisor needs.
type Config struct {
	JS        jetstream.JetStream
	Store     *kc.Store
	Marks     jetstream.KeyValue // cairn-outbox-sent
	Handovers jetstream.KeyValue // cairn-handovers
	// NaturalKeys holds each run's input, claimed for its run id (cairn-natural-keys).
	NaturalKeys jetstream.KeyValue
	Pipeline    pipeline.Definition
	// Space is the pipeline's share of the NATS account; the zero Space is the reference
	// night's.
	Space assets.Space
	Lease time.Duration // a lease unchanged this long has expired; default 15s
	// Heartbeat is how often holders renew; a lease not renewed for two heartbeats gets its
	// owner asked whether it is alive. Default Lease/3.
	Heartbeat   time.Duration
	TakeoverGap time.Duration // default 500ms
	Sweep       time.Duration // how often the checkpoints are swept; default 1s
	// UnknownSweep is how often the work queues (CAIRN_RUNS, CAIRN_STEPS) are swept for
	// messages no consumer takes, which are rejected and removed (unknown.go); default 10s.
	// UnknownLimit is the most messages one such sweep handles; default 100.
	UnknownSweep time.Duration
	UnknownLimit int
	// StallTimeout hands over a running or finishing run whose record made no progress
	// (kvcheckpoint.Progressed: lease renewals do not count) for this long, counted from its
	// progressed_at (timers.go); default 10m.
	StallTimeout time.Duration
	// OutboxStall hands over a finishing run whose mail is still undelivered this long after
	// its last progress (a message delivered is progress), naming the messages; default 15m. A message refused for good hands
	// its finishing run over at once.
	OutboxStall time.Duration
	// ReassignLimit hands over a run instead of reassigning its step once more; default 5.
	ReassignLimit int
	// ApprovalTimeout hands over a run that waited for approval this long, counted from its
	// approval.since; default 24h.
	ApprovalTimeout time.Duration
	Now             func() time.Time
	Logger          *slog.Logger
	Metrics         *metrics.Metrics // default: metrics of its own, not served
	// Faults are the supervisor's crash points (supervisor.after-record); nil injects none.
	Faults *faults.Set
	// Approvers checks that an approve is signed by the registered approver it names
	// (approver.go); nil takes the name an approve gives.
	Approvers *identity.Ring
	// Notify tells people of a handover, once per note id. May be nil.
	Notify func(ctx context.Context, kind string, note runner.HandoverNote, generation int, token uint64)
	// NoticeBurst is the most notices of records that fail their checks sent alone in a
	// NoticeWindow; past it they are counted and told by one summary notice in the window
	// (notices.go). Defaults 3 and 10m.
	NoticeBurst  int
	NoticeWindow time.Duration
}

// Supervisor consumes the control durable and sweeps the checkpoints.
type Supervisor struct {
	cfg   Config
	audit *audit.Publisher
	log   *slog.Logger
	// expiry judges the leases the sweep sees; takeover releases those gone or expired.
	expiry   lease.Expiry
	takeover lease.Takeover

	ready chan struct{} // closed once Run consumes commands and advisories

	mu   sync.Mutex
	seen map[string]observation // run -> what the last sweep saw
	runs map[string]watched     // run -> its latest record, kept by a watch on the bucket
	// links: the revision the watch saw last of each run, so that a record written over
	// it is known to be the newest without reading its header (kvcheckpoint.Links)
	links kc.Links
	mail  map[string]delivery // finishing run -> how much of its mail was undelivered, and since when
	// bad are the entries the watch could not trust, for a note (untrusted.go); panicked
	// the runs whose sweep panicked, at the revision it panicked on.
	bad map[string]untrusted
	// over are the runs a writer overreached (overreach.go), until their good record is back
	over     map[string]overreached
	panicked map[string]uint64
	queues   map[string]jetstream.Stream // the work queues the unknown sweep reads, by name
	notices  noticeBound                 // the notices of untrusted records in the window
}

// delivery is how many of a finishing run's messages a sweep found undelivered, and when, by
// the supervisor's clock, that number last fell (zero until it has fallen).
type delivery struct {
	pending int
	fell    time.Time
}

// watched is a run's latest record as the bucket's watch delivered it, since when it has
// made no progress, and since when it waits for a person (timers.go).
type watched struct {
	rec      *kc.Record
	rev      uint64
	progress timer
	approval timer // while the run waits for approval
}

// observation is what a sweep saw of a run, and when by the supervisor's own clock.
type observation struct {
	lease   string // lease.Mark: token/write_id, "" when none
	current string // the step the run waits on
	since   time.Time
	asked   bool // whether the lease's owner was asked if it is alive
}

const source = "/cairn/supervisor"

// New checks the configuration.
func New(c Config) (*Supervisor, error) {
	c.Lease = cmp.Or(c.Lease, lease.DefaultLease)
	c.Heartbeat = cmp.Or(c.Heartbeat, c.Lease/3)
	c.TakeoverGap = cmp.Or(c.TakeoverGap, lease.DefaultTakeoverGap)
	c.Sweep = cmp.Or(c.Sweep, time.Second)
	c.UnknownSweep = cmp.Or(c.UnknownSweep, 10*time.Second)
	c.UnknownLimit = cmp.Or(c.UnknownLimit, 100)
	c.StallTimeout = cmp.Or(c.StallTimeout, 10*time.Minute)
	c.OutboxStall = cmp.Or(c.OutboxStall, 15*time.Minute)
	c.ReassignLimit = cmp.Or(c.ReassignLimit, 5)
	c.ApprovalTimeout = cmp.Or(c.ApprovalTimeout, 24*time.Hour)
	c.NoticeBurst = cmp.Or(c.NoticeBurst, 3)
	c.NoticeWindow = cmp.Or(c.NoticeWindow, 10*time.Minute)
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.JS == nil || c.Store == nil || c.Marks == nil || c.Handovers == nil || c.NaturalKeys == nil {
		return nil, errors.New("supervisor: needs JetStream, the checkpoint store, the outbox marks, the handover bucket and the natural keys")
	}
	if err := c.Pipeline.Validate(); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	s := &Supervisor{cfg: c, audit: audit.New(c.JS, "supervisor", c.Now).In(c.Space), log: c.Logger.With(slog.String("service", "supervisor")), seen: map[string]observation{}, runs: map[string]watched{}, mail: map[string]delivery{},
		bad: map[string]untrusted{}, over: map[string]overreached{}, panicked: map[string]uint64{}, queues: map[string]jetstream.Stream{}, ready: make(chan struct{}),
		expiry: lease.Expiry{Heartbeat: c.Heartbeat, Lease: c.Lease}}
	s.takeover = lease.Takeover{JS: c.JS, Space: c.Space, Store: c.Store, Source: source, Gap: c.TakeoverGap, Now: c.Now, Publish: s.publish}
	return s, nil
}

// Run frees the leases of owners that are gone, then consumes commands and sweeps until ctx
// ends. It returns nil on a clean stop, and an error wrapping consume.ErrEnded when the
// command loop or the watch on the checkpoints ends by itself (the control durable deleted,
// the connection closed).
func (s *Supervisor) Run(ctx context.Context) error {
	w, err := s.cfg.Store.KV().WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching the checkpoints: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() { // the current records, then nil
		if e == nil {
			break
		}
		s.observe(e)
	}
	s.judgeHistory(ctx)
	s.SweepOnce(ctx, true)
	if ctx.Err() != nil {
		return nil // stopped while starting: a clean stop
	}
	adv, err := s.cfg.JS.Conn().QueueSubscribe(s.cfg.Space.MaxDeliveries(assets.StreamSteps), "cairn-supervisor", func(m *nats.Msg) {
		defer consume.Recover(s.log, nil, nil)
		s.onMaxDeliveries(ctx, m)
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", s.cfg.Space.MaxDeliveries(assets.StreamSteps), err)
	}
	defer func() { _ = adv.Unsubscribe() }()
	cadv, err := s.cfg.JS.Conn().QueueSubscribe(s.cfg.Space.MaxDeliveries(assets.StreamRuns), "cairn-supervisor", func(m *nats.Msg) {
		defer consume.Recover(s.log, nil, nil)
		s.onCommandMaxDeliveries(ctx, m)
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", s.cfg.Space.MaxDeliveries(assets.StreamRuns), err)
	}
	defer func() { _ = cadv.Unsubscribe() }()
	cons, err := s.cfg.JS.Consumer(ctx, s.cfg.Space.Stream(assets.StreamRuns), assets.ConsumerControl)
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting: a clean stop
	}
	if err != nil {
		return fmt.Errorf("looking up consumer %q: %w", assets.ConsumerControl, err)
	}
	// The command loop and the sweeps stop together: whichever ends first ends the other.
	loopCtx, stopLoop := context.WithCancel(ctx)
	loop := make(chan error, 1)
	go func() {
		loop <- consume.Run(loopCtx, cons, func(m jetstream.Msg) { s.Handle(ctx, m) },
			consume.Drain(), consume.StopWithin(5*time.Second), consume.Logger(s.log))
	}()
	defer func() {
		stopLoop()
		if loop != nil {
			<-loop
		}
	}()
	t := time.NewTicker(s.cfg.Sweep)
	defer t.Stop()
	u := time.NewTicker(s.cfg.UnknownSweep)
	defer u.Stop()
	close(s.ready)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-loop:
			loop = nil
			if ctx.Err() != nil {
				return nil
			}
			return err
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // the watch ends with ctx: a clean stop
				}
				return fmt.Errorf("watching the checkpoints: %w", consume.ErrEnded)
			}
			if e != nil {
				s.observe(e)
			}
		case <-t.C:
			s.SweepOnce(ctx, false)
		case <-u.C:
			if _, err := s.SweepUnknown(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweeping the work queues for unknown subjects", slog.Any("error", err))
			}
		}
	}
}

// Ready is closed once Run consumes commands and listens for advisories.
func (s *Supervisor) Ready() <-chan struct{} { return s.ready }

// Handle decodes and applies one run command, then settles its message. A command whose
// handling panics is rejected (on cairn.rejected, with the panic) and termed.
func (s *Supervisor) Handle(ctx context.Context, m jetstream.Msg) {
	meta, _ := m.Metadata()
	var seq uint64
	if meta != nil {
		seq = meta.Sequence.Stream
	}
	defer consume.Recover(s.log, m, func(err error) { s.rejectPanic(ctx, m, seq, err) })
	nm := natsMsg(m)
	ev, err := events.DecodeCommand(s.cfg.Space, nm, fmt.Sprintf("seq-%d", seq))
	if err == nil {
		err = s.apply(ctx, ev)
	}
	verb := "invalid"
	if _, v, perr := events.ParseRunSubject(s.cfg.Space, m.Subject()); perr == nil && v != "" {
		verb = v
	}
	var rej *rejection
	switch {
	case err == nil:
		s.cfg.Metrics.Commands.WithLabelValues(verb, "applied").Inc()
		_ = m.Ack()
	case errors.As(err, &rej), errors.Is(err, events.ErrInvalid), errors.Is(err, events.ErrInvalidID),
		errors.Is(err, kc.ErrCorrupt): // a record not trusted is never acted on: the sweep hands its run over
		id := events.RejectedID(s.runStream(), seq)
		runID := ev.Subject
		if rej != nil && rej.runID != "" {
			runID = rej.runID
		}
		if rerr := s.audit.Reject(ctx, id, runID, events.NewRejected(s.runStream(), seq, nm, err.Error())); rerr != nil {
			s.log.Error("recording a rejected command", slog.Any("error", rerr))
			_ = m.NakWithDelay(time.Second)
			return
		}
		s.cfg.Metrics.Commands.WithLabelValues(verb, "rejected").Inc()
		s.log.Warn("command rejected", slog.String("subject", m.Subject()), slog.Any("reason", err))
		_ = m.TermWithReason(cut(err.Error(), 200))
	case errors.Is(err, kc.ErrNewerSchema):
		// A newer release wrote the run (a rolling upgrade): its supervisor takes the command.
		s.cfg.Metrics.Commands.WithLabelValues(verb, "retried").Inc()
		s.log.Warn("command left to a newer release", slog.String("subject", m.Subject()), slog.Any("error", err))
		_ = m.NakWithDelay(kc.NewerSchemaRetry)
	default:
		s.cfg.Metrics.Commands.WithLabelValues(verb, "retried").Inc()
		s.log.Warn("command failed, will retry", slog.String("subject", m.Subject()), slog.Any("error", err))
		_ = m.NakWithDelay(time.Second)
	}
}

func natsMsg(m jetstream.Msg) *nats.Msg {
	return &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
}

// rejection is a command refused for a reason of its own (not a malformed message).
type rejection struct {
	reason string
	runID  string // the run it was about, when the command's subject does not say (a start)
}

func (r *rejection) Error() string { return r.reason }

func reject(format string, args ...any) error {
	return &rejection{reason: fmt.Sprintf(format, args...)}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (s *Supervisor) stamp() string { return s.cfg.Now().UTC().Format(time.RFC3339Nano) }

func (s *Supervisor) record(ctx context.Context, id string, a events.Audit) {
	if err := s.audit.Record(ctx, id, a); err != nil {
		s.log.Warn("audit event not stored", slog.String("id", id), slog.Any("error", err))
	}
}

func (s *Supervisor) publish(ctx context.Context, runID, step string, generation int, rev uint64) error {
	return stepevent.Publish(ctx, s.cfg.JS, s.cfg.Space, source, runID, step, generation, rev, s.cfg.Now())
}

// publishReady publishes the event of every step of rec that may run now (one, for steps
// run one after another; each branch's, where steps run side by side).
func (s *Supervisor) publishReady(ctx context.Context, rec *kc.Record, rev uint64) error {
	var errs []error
	for _, step := range rec.Ready() {
		errs = append(errs, s.publish(ctx, rec.RunID, step, rec.Generation, rev))
	}
	return errors.Join(errs...)
}
