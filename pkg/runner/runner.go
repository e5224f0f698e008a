package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/consume"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
	"github.com/cairnhq/cairn/pkg/metrics"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/tracing"
)

// Config is what a step runner needs.
type Config struct {
	JS        jetstream.JetStream
	Store     *kvcheckpoint.Store
	Artifacts *artifacts.Store
	Handovers jetstream.KeyValue
	// Memo keeps the answers of memoised calls (Attempt.Memo), the space's cairn-memo; nil: a step
	// cannot memoise.
	Memo jetstream.KeyValue
	// Limit is the step's declared rate limit (pipeline.Step.RateLimit), kept for every
	// instance at once: Memo waits for a slot of it before each call it makes, and
	// Attempt.Hold passes a Retry-After on. nil: none.
	Limit    *ratelimit.Limiter
	Pipeline pipeline.Definition
	StepName string
	Step     Step
	Service  string // default StepName
	// Space is the pipeline's share of the NATS account: its streams and subjects. The zero
	// Space is the reference night's.
	Space assets.Space

	Heartbeat     time.Duration // default 5s
	Lease         time.Duration // default 15s
	TakeoverGap   time.Duration // default 500ms
	RetryAttempts int           // default 3
	LoopGuard     int           // default 3
	ParkLimit     float64       // default 0.1
	MaxDeliver    int           // default 20
	CodeVersion   string        // the code's version in the record; default BuildVersion()
	// Concurrency is how many messages the runner handles at once (default 1, at most
	// 1000, the step consumers' MaxAckPending). Different runs go on in parallel; two
	// messages of one run never do: the second waits for the first to be settled. With
	// more than 1, Step.Run is called concurrently for different runs.
	Concurrency int
	// StopGrace is how long the step in hand may go on after ctx ends (SIGTERM) before it is
	// stopped: lease released, message handed back with a delay. Default 10s.
	StopGrace time.Duration
	Metrics   *metrics.Metrics // default: metrics of its own, not served
	// Approval makes the step wait for a person before it runs (the step must be a Planner).
	Approval bool
	// Notify tells people of a handover (kind "handover") or of a wait for approval (kind
	// "approval"), once per note id; token is the attempt's. May be nil.
	Notify func(ctx context.Context, kind string, note HandoverNote, generation int, token uint64)

	Faults *faults.Set
	Now    func() time.Time
	Logger *slog.Logger
	// Finishing is called after the last step moved the run to finishing. May be nil.
	Finishing func(ctx context.Context, runID string)
	// Ended is called at once when the consume loop ends by itself (the step's durable
	// deleted, the connection closed), before the step in hand gets its grace; Run then
	// returns the same error. May be nil. (A service turns unready with it.)
	Ended func(err error)
}

func (c Config) withDefaults() Config {
	c.Service = cmp.Or(c.Service, c.StepName)
	c.Heartbeat = cmp.Or(c.Heartbeat, lease.DefaultHeartbeat)
	c.Lease = cmp.Or(c.Lease, lease.DefaultLease)
	c.TakeoverGap = cmp.Or(c.TakeoverGap, lease.DefaultTakeoverGap)
	c.RetryAttempts = cmp.Or(c.RetryAttempts, 3)
	c.LoopGuard = cmp.Or(c.LoopGuard, 3)
	c.ParkLimit = cmp.Or(c.ParkLimit, 0.1)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, 20)
	if c.CodeVersion == "" {
		c.CodeVersion = BuildVersion()
	}
	c.StopGrace = cmp.Or(c.StopGrace, 10*time.Second)
	c.Concurrency = cmp.Or(c.Concurrency, 1)
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.JS == nil || c.Store == nil || c.Artifacts == nil || c.Handovers == nil {
		errs = append(errs, errors.New("the runner needs JetStream, the checkpoint store, the artifact store and the handover bucket"))
	}
	if _, ok := c.Pipeline.Step(c.StepName); !ok {
		errs = append(errs, fmt.Errorf("step %q is not in pipeline %q", c.StepName, c.Pipeline.Name))
	}
	if c.Step == nil {
		errs = append(errs, fmt.Errorf("step %q has no implementation", c.StepName))
	}
	if !lease.ValidService(c.Service) {
		errs = append(errs, fmt.Errorf("service %q is not one subject token of letters, digits, '-' and '_' (it names the owner inbox)", cut(c.Service, 64)))
	}
	if c.Approval && !AbilitiesOf(c.Step).Plans {
		errs = append(errs, fmt.Errorf("step %q cannot wait for approval: it cannot plan", c.StepName))
	}
	if def, ok := c.Pipeline.Step(c.StepName); ok && (c.Approval || def.Irreversible) && !def.Leased {
		// The gate is taken under the step's lease, which moves the whole run to waiting:
		// a lease-free step would run ungated, an irreversible one whatever the evidence.
		why := "wait for approval"
		if !c.Approval {
			why = "be undone, and would not stop while the run's evidence is unclear"
		}
		errs = append(errs, fmt.Errorf("step %q cannot %s: it takes no lease (declare it Leased)", c.StepName, why))
	}
	if err := declarationsAgree(c); err != nil {
		errs = append(errs, err)
	}
	if c.Concurrency < 1 || c.Concurrency > maxConcurrency {
		errs = append(errs, fmt.Errorf("concurrency %d is outside 1 to %d", c.Concurrency, maxConcurrency))
	}
	if c.Lease < 3*c.Heartbeat {
		errs = append(errs, fmt.Errorf("the lease (%s) must be at least 3 heartbeats (%s)", c.Lease, c.Heartbeat))
	}
	if !codeVersionOK(c.CodeVersion) {
		errs = append(errs, fmt.Errorf("the code version %q is not printable ASCII of at most %d bytes", c.CodeVersion, kvcheckpoint.MaxCodeVersion))
	}
	return errors.Join(errs...)
}

// Runner runs one step of a pipeline: it consumes the step's durable on CAIRN_STEPS and
// follows the step protocol for every message.
type Runner struct {
	cfg   Config
	def   pipeline.Step
	hooks hooks // what the step does besides Run
	owner kvcheckpoint.Owner
	// takeover releases the lease of an owner proven gone (the fast takeover).
	takeover lease.Takeover
	audit    *audit.Publisher
	log      *slog.Logger
	m        *metrics.Metrics
	hot      hotMetrics

	runs        runGates
	unacked     chan struct{} // watchAcks: a slot per attempt whose publishes are unanswered
	fencedTotal atomic.Int64
}

// FencedTotal counts attempts stopped because their lease or fence was taken.
func (r *Runner) FencedTotal() int64 { return r.fencedTotal.Load() }

// New checks the configuration and returns a runner.
func New(c Config) (*Runner, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("step runner %q: %w", c.StepName, err)
	}
	if !c.Store.Moves() {
		// The budget counts inline outputs as room lent (kvcheckpoint, "The record's
		// budget"): a write that needs it moves them to the artifact store first.
		c.Store = c.Store.Moving(c.Artifacts.SaveObject)
	}
	def, _ := c.Pipeline.Step(c.StepName)
	owner := lease.NewOwner(c.Space, c.Service)
	r := &Runner{hooks: hooksOf(c.Step),
		cfg: c, def: def, owner: owner,
		audit:   audit.New(c.JS, c.Service, c.Now).In(c.Space),
		log:     c.Logger.With(slog.String("step", c.StepName), slog.String("owner", owner.Name)),
		m:       c.Metrics,
		unacked: make(chan struct{}, 4*c.Concurrency),
		hot: hotMetrics{
			started:  c.Metrics.StepsStarted.WithLabelValues(c.StepName),
			verified: c.Metrics.StepsVerified.WithLabelValues(c.StepName),
			parked:   c.Metrics.Parked.WithLabelValues(c.StepName),
			took:     c.Metrics.StepDuration.WithLabelValues(c.StepName, "verified"),
		},
	}
	r.takeover = lease.Takeover{JS: c.JS, Space: c.Space, Store: c.Store, Source: "/cairn/" + c.Service, Gap: c.TakeoverGap, Now: c.Now, Publish: r.publishStep}
	return r, nil
}

// hotMetrics are the step's series that every attempt updates, looked up once.
type hotMetrics struct {
	started, verified, parked prometheus.Counter
	took                      prometheus.Observer // of verified attempts
}

// Owner is this runner's identity in leases.
func (r *Runner) Owner() kvcheckpoint.Owner { return r.owner }

// Run consumes the step's messages until ctx ends, then stops taking work and gives the step
// in hand StopGrace to finish before stopping it (its lease released, its message handed back
// with a delay). It returns nil on a clean stop. A consume loop that ends by itself (the
// step's durable deleted, the connection closed) is an error wrapping consume.ErrEnded:
// Ended hears of it at once, the step in hand gets the same grace, then Run returns it.
func (r *Runner) Run(ctx context.Context) error {
	stopAnswering, err := lease.Answer(r.cfg.JS.Conn(), r.owner)
	if err != nil {
		return err
	}
	defer stopAnswering()
	cons, err := r.cfg.JS.Consumer(ctx, r.cfg.Space.Stream(assets.StreamSteps), r.cfg.StepName)
	if err != nil && ctx.Err() != nil {
		return nil // stopped before it took any work: a clean stop
	}
	if err != nil {
		return fmt.Errorf("looking up consumer %q: %w", r.cfg.StepName, err)
	}
	// The work goes on for StopGrace after the loop stops, so the step in hand may finish.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	grace := time.AfterFunc(time.Hour, stopWork)
	grace.Stop()
	defer grace.Stop()
	stopping := sync.OnceFunc(func() {
		r.log.Info("stopping: no new work; the step in hand has its grace", slog.Duration("grace", r.cfg.StopGrace))
		grace.Reset(r.cfg.StopGrace)
	})
	defer context.AfterFunc(ctx, stopping)()
	var wg sync.WaitGroup
	slots := make(chan struct{}, r.cfg.Concurrency)
	handle := func(m jetstream.Msg) {
		wg.Add(1)
		if ctx.Err() != nil {
			_ = m.Nak() // stopping: a message still buffered goes back at once, for another instance
			wg.Done()
			return
		}
		if r.cfg.Concurrency == 1 {
			defer wg.Done()
			r.Handle(work, m)
			return
		}
		// Wait for a free slot (this holds back the consumer's deliveries), then handle
		// the message beside the others.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			_ = m.Nak()
			wg.Done()
			return
		}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			r.Handle(work, m)
		}()
	}
	err = consume.Run(ctx, cons, handle, consume.Pull(jetstream.PullMaxMessages(r.cfg.Concurrency)),
		consume.Drain(), consume.StopWithin(r.cfg.StopGrace+10*time.Second), consume.Logger(r.log),
		consume.Ended(func(err error) {
			r.log.Error("the step's consume loop ended", slog.Any("error", err))
			if r.cfg.Ended != nil {
				r.cfg.Ended(err)
			}
			stopping()
		}))
	wg.Wait()
	for range cap(r.unacked) { // every publish answered (or given up on)
		r.unacked <- struct{}{}
	}
	for range cap(r.unacked) {
		<-r.unacked
	}
	return err
}

// observe records how long an attempt took, by outcome.
func (r *Runner) observe(a *Attempt, outcome string) {
	took := r.cfg.Now().Sub(a.began).Seconds()
	if outcome == "verified" {
		r.hot.took.Observe(took)
		return
	}
	r.m.StepDuration.WithLabelValues(a.Step, outcome).Observe(took)
	r.m.StepsFailed.WithLabelValues(a.Step, outcome).Inc()
}

// Handle follows the step protocol for one message and settles it.
func (r *Runner) Handle(ctx context.Context, m jetstream.Msg) {
	meta, _ := m.Metadata()
	var seq uint64
	delivered := uint64(1)
	if meta != nil {
		seq, delivered = meta.Sequence.Stream, meta.NumDelivered
	}
	// A panic anywhere below hands the run over (or rejects an event it cannot place) and
	// terms the event: a bug meets a person once, it does not crash the worker every delivery.
	nm := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
	var runID string
	defer consume.Recover(r.log, m, func(err error) { r.handoverPanic(ctx, nm, seq, runID, err) })
	r.handle(ctx, m, nm, seq, delivered, &runID)
}

// handle is Handle below its recover; it sets *runID once the event names its run.
func (r *Runner) handle(ctx context.Context, m jetstream.Msg, nm *nats.Msg, seq, delivered uint64, runID *string) {
	// 1. Decode and validate.
	var ready events.StepReady
	ev, err := events.Decode(nm)
	if err == nil {
		err = ev.Unmarshal(&ready)
	}
	if err == nil && (ready.Step != r.cfg.StepName || ready.RunID != ev.Subject || m.Subject() != r.cfg.Space.Step(ready.Step, ready.RunID)) {
		err = fmt.Errorf("%w: step event for %s/%s arrived on %s", events.ErrInvalid, ready.RunID, ready.Step, m.Subject())
	}
	if err != nil {
		r.reject(ctx, r.cfg.Space.Stream(assets.StreamSteps), seq, nm, ev.Subject, err)
		_ = m.TermWithReason(err.Error())
		return
	}
	*runID = ready.RunID
	// One message of a run at a time: a duplicate waits until the first is settled.
	defer r.runs.enter(ready.RunID, m, r.cfg.Heartbeat)()
	ctx, span := tracing.Start(ctx, ev, "step "+r.cfg.StepName, attribute.String("cairn.step", r.cfg.StepName), attribute.Int64("cairn.delivered", int64(delivered)))
	defer span.End()
	if delivered >= uint64(r.cfg.MaxDeliver) {
		r.handoverIdle(ctx, ready.RunID, "max-deliver", fmt.Sprintf("step event delivered %d times (max deliver %d)", delivered, r.cfg.MaxDeliver))
		_ = m.TermWithReason("max deliver reached")
		return
	}
	settle := r.attempt(ctx, m, ready, delivered > 1, scheduledAt(ev.ID, ready))
	settle(m)
}

// scheduledAt is the checkpoint revision whose write scheduled a step event, from its id
// (<run_id>:<step>:ready:<rev>); 0 when the id says none.
func scheduledAt(id string, ready events.StepReady) uint64 {
	rest, ok := strings.CutPrefix(id, ready.RunID+":"+ready.Step+":ready:")
	if !ok {
		return 0
	}
	rev, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return 0
	}
	return rev
}

type settleFunc func(m jetstream.Msg)

func ack(m jetstream.Msg) { _ = m.Ack() }

func nakAfter(d time.Duration) settleFunc {
	return func(m jetstream.Msg) { _ = m.NakWithDelay(d) }
}

func (r *Runner) reject(ctx context.Context, stream string, seq uint64, m *nats.Msg, runID string, reason error) {
	id := events.RejectedID(stream, seq)
	if err := r.audit.Reject(ctx, id, runID, events.NewRejected(stream, seq, m, reason.Error())); err != nil {
		r.log.Error("recording a rejected message", slog.String("id", id), slog.Any("error", err))
	}
}
