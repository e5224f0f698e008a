package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/audit"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/metrics"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/supervisor"
	"github.com/cairnhq/cairn/pkg/undo"
)

// Supervisor is the supervisor's service name (and its signing key's).
const Supervisor = "supervisor"

// OutboxSender is the outbox sender's service name (and its signing key's): the name whose
// records the checkpoints take for the sender's (kvcheckpoint.DefaultRoles), so that a run
// it makes done reads as the sender's move.
const OutboxSender = "outbox-sender"

// Compensator is the compensator's service name (and its signing key's): the name whose
// records the checkpoints take for an undo's progress (kvcheckpoint.DefaultRoles).
const Compensator = "compensator"

// Config is a pipeline and how its services run.
type Config struct {
	JS jetstream.JetStream
	// Job is the pipeline and its steps' implementations in one list; Pipeline and Steps
	// are taken from it (leave them zero).
	Job Job
	// Pipeline and Steps are the pipeline and each step's implementation by step name, for a
	// host that keeps them apart (the reference night, whose definition is read without its
	// databases): one implementation for every step of Pipeline. Leave them zero with a Job.
	Pipeline pipeline.Definition
	Steps    map[string]runner.Step
	// KeysDir keeps each service's signing seed, <service>.seed: Init makes the missing ones
	// and registers their public keys; Run signs with them.
	KeysDir string

	Replicas      int           // of every asset: 1, 3 or 5; default 1
	AckWait       time.Duration // of the step consumers; default 30s
	Lease         time.Duration // default 15s
	Heartbeat     time.Duration // default 5s
	TakeoverGap   time.Duration // default 500ms
	StallTimeout  time.Duration // a run that makes no progress this long is handed over; default 10m
	RetryAttempts int           // in-process tries of an item's outside call (Attempt.Retry); default 3
	LoopGuard     int           // attempts in a row without progress before a handover; default 3
	Concurrency   int           // messages each step runner handles at once; default 1
	StopGrace     time.Duration // default 10s
	MaxDeliver    int           // deliveries of a step event before a handover; default 20
	ParkLimit     float64       // share of a step's items it may park before a handover; default 0.1
	ReassignLimit int           // takeovers of one step before the supervisor hands the run over; default 5
	CodeVersion   string        // the code's version each step records; default runner.BuildVersion()

	// Sizes are the sizes of the pipeline's buckets, object store and streams (assets.Limits;
	// zero fields: the defaults). Init sets them, and the registration keeps them for cairn
	// init, which sets them again on the pipeline's existing assets.
	Sizes assets.Limits

	// DefaultSpace puts the pipeline in the default space, whose assets keep the names of
	// DESIGN.md (CAIRN_RUNS, cairn-runs, cairn.runs.start): the reference night's alone.
	DefaultSpace bool
	// Signers are the services' signing keys, by service name, for a process that holds them
	// otherwise than as files in KeysDir (CAIRN_SIGNING_SEED); a service not here reads
	// KeysDir.
	Signers map[string]*identity.Signer
	// SystemsOf, when set, gives the reversals of the pipeline's outside systems once the
	// compensator's handles exist (its checkpoint store, the outbox marks): for systems
	// that need them. Its systems join Systems.
	SystemsOf func(Handles) (map[string]undo.System, error)
	// Ended is called at once when a service's loop ends by itself (its durable deleted, the
	// connection closed), before the step in hand gets its grace: a process turns unready
	// with it. May be nil.
	Ended func(service string, err error)

	// Outbox is the pipeline's outbox sender, which delivers the messages its steps queue
	// (runner.Attempt.Queue) once each: its Transport (outbox.SMTPTransport{Addr: ...}, an
	// outbox.WebhookTransport, both through outbox.Routed) and its Allow (the From its
	// messages are sent as, the recipients and the webhook they may go to) are required; the
	// rest as outbox.SenderConfig says. nil: no sender runs, and a run whose steps queued
	// messages stays finishing until OutboxStall hands it over naming them.
	//
	// JS, Space, Stream, Consumer and Bucket are the pipeline's: leave them zero. Run fills
	// Logger and Faults from this Config when nil, admits a message by the run's record
	// (outbox.RecordAdmission) and checks who queued it by the space's keys (outbox.Trust)
	// unless Admit or Trust is set, records a refused or rejected message on the space's
	// timeline before calling Refused or Rejected, and moves a finishing run to done once its
	// last message is marked sent (after calling Marked). Set it before Init, which makes the
	// sender's signing key.
	Outbox *outbox.SenderConfig
	// OutboxStall hands over a finishing run whose messages are still undelivered this long
	// after its last progress; default 15m.
	OutboxStall time.Duration

	// Systems are the reversals of the pipeline's outside systems, by the system name its
	// effects carry (runner.Effect's Reverse.System). With any, Run runs the pipeline's
	// compensator (service Compensator), which takes the undo commands of the pipeline's runs
	// (Command, events.VerbUndo) and reverses each effect through its system, newest first,
	// fenced by the undo's token, resuming from its cursor after a crash. An effect whose
	// system is not here is never skipped: the undo hands the run over naming the system.
	// Messages queued with Attempt.Queue are not reversed (what went out stays out); those
	// queued with Attempt.QueueWithdrawable are, by system saga.Mail, which a pipeline with
	// an Outbox has without registering it (undo.Mail on the pipeline's outbox: a message
	// not yet handed to the sender is cancelled, one that may have gone gets its
	// withdrawal). Set Systems before Init, which makes the compensator's signing key.
	Systems map[string]undo.System

	// ApprovalSteps wait for a person before they run (CAIRN_APPROVAL_STEPS): each must be a
	// runner.Planner, whose plan is stored and approved (a signed `cairn approve RUN
	// --pipeline NAME`) before Run runs while a fresh plan still has its digest. A run nobody
	// approves or rejects within ApprovalTimeout (CAIRN_APPROVAL_TIMEOUT, default 24h, counted
	// from the wait's start and kept across restarts) is handed over.
	ApprovalSteps   []string
	ApprovalTimeout time.Duration
	// Notices tell people of every handover and every wait for approval, through the
	// pipeline's outbox (its sender runs when Notices send anything, with or without Outbox).
	// Set them before Init, which makes the sender's signing key.
	Notices Notices

	// Limits are the shared rate limits the steps declare (pipeline.Step.RateLimit), by the
	// name of the setting that declares each: Init registers them for the fault map.
	Limits map[string]ratelimit.Limit

	// MetricsAddr is where Run serves /metrics, /healthz and /readyz (CAIRN_METRICS_ADDR; port
	// 0: one the kernel chooses, logged as "serving metrics" with its url and given to
	// Serving). /readyz answers 200 while every service runs and the NATS connection is up,
	// 503 with the reason otherwise (starting, a service that stopped by itself, reconnecting,
	// stopping). "": none served.
	MetricsAddr string
	Serving     func(addr net.Addr) // called once the metrics are served; may be nil

	Faults  *faults.Set // crash points (cairn chaos, tests); nil injects none
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	Now     func() time.Time

	jobErr error // a Job given beside a Pipeline or Steps, or with a step broken (withJob)
}

// Services are the pipeline's services: its steps, in order, the supervisor, the outbox
// sender when the pipeline has one (Outbox) or sends notices (Notices), and the compensator
// when it registers its systems' reversals (Systems, SystemsOf), has an outbox (whose
// withdrawals it sends), or may wait for a person (whose reject undoes the run).
func (c Config) Services() []string {
	c = c.withJob()
	out := append(c.Pipeline.Names(), Supervisor)
	if c.Outbox != nil || c.Notices.Any() {
		out = append(out, OutboxSender)
	}
	if len(c.Systems) > 0 || c.SystemsOf != nil || c.Outbox != nil || c.gates() {
		out = append(out, Compensator)
	}
	return out
}

// gates reports whether a run may wait for a person (an approval gate, or a step that cannot
// be undone, which waits while the evidence is unclear): a rejected wait is undone, so the
// compensator runs to make the run undone even with nothing to reverse.
func (c Config) gates() bool {
	return len(c.ApprovalSteps) > 0 || slices.ContainsFunc(c.Pipeline.Steps, func(s pipeline.Step) bool { return s.Irreversible })
}

// Space is the pipeline's share of the NATS account, named after it (assets.SpaceOf); an
// invalid name is reported by Init and Run.
func (c Config) Space() assets.Space {
	c = c.withJob()
	if c.DefaultSpace {
		return assets.Default
	}
	sp, _ := assets.SpaceOf(c.Pipeline.Name)
	return sp
}

// Assets is the pipeline's asset configuration.
func (c Config) Assets() assets.Config {
	c = c.withJob()
	return assets.Config{Space: c.Space(), Replicas: c.Replicas, Steps: c.Pipeline.Names(), AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, Limits: c.Sizes}
}

// validate checks the configuration; withSteps: the steps' implementations too (Init
// needs none).
func (c Config) validate(withSteps bool) error {
	var errs []error
	if c.jobErr != nil {
		errs = append(errs, fmt.Errorf("the Job: %w", c.jobErr))
	}
	if c.JS == nil {
		errs = append(errs, errors.New("no JetStream"))
	}
	if err := c.Pipeline.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pipeline %q: %w", c.Pipeline.Name, err))
	}
	if _, err := assets.SpaceOf(c.Pipeline.Name); err != nil && !c.DefaultSpace {
		errs = append(errs, err)
	}
	if c.KeysDir == "" {
		errs = append(errs, errors.New("no KeysDir for the services' signing seeds"))
	}
	for _, name := range []string{Supervisor, OutboxSender, Compensator} {
		if _, ok := c.Pipeline.Step(name); ok {
			errs = append(errs, fmt.Errorf("step %q has the name of a service of the framework's (%s, %s, %s)", name, Supervisor, OutboxSender, Compensator))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Systems)) {
		if c.Systems[name] == nil {
			errs = append(errs, fmt.Errorf("Systems: system %q has no reversal (nil)", name))
		}
	}
	for _, name := range c.ApprovalSteps {
		if def, ok := c.Pipeline.Step(name); !ok {
			errs = append(errs, fmt.Errorf("CAIRN_APPROVAL_STEPS names %q, which is not a step of pipeline %q %v", name, c.Pipeline.Name, c.Pipeline.Names()))
		} else if !def.Leased {
			errs = append(errs, fmt.Errorf("CAIRN_APPROVAL_STEPS names %q, which cannot wait for approval: it takes no lease (declare it Leased), and a gate holds the whole run", name))
		} else if withSteps && !runner.AbilitiesOf(c.Steps[name]).Plans {
			errs = append(errs, fmt.Errorf("CAIRN_APPROVAL_STEPS names %q, which cannot wait for approval: its implementation is no runner.Planner (it cannot say what it will do before it does it)", name))
		}
	}
	if c.ApprovalTimeout < 0 {
		errs = append(errs, fmt.Errorf("CAIRN_APPROVAL_TIMEOUT must be positive, not %s", c.ApprovalTimeout))
	}
	if err := c.Notices.Validate(); err != nil {
		errs = append(errs, err)
	}
	if n := c.Notices; n.Email != "" {
		if n.Mail == nil && (c.Outbox == nil || c.Outbox.Transport == nil) {
			errs = append(errs, errors.New("CAIRN_NOTIFY_EMAIL: nothing delivers the mail notices (Notices.Mail: an outbox.SMTPTransport for CAIRN_SMTP_ADDR, or an outbox.FileTransport; or the Outbox's Transport)"))
		}
	}
	if n, o := c.Notices, c.Outbox; n.Webhook != "" && o != nil && o.Allow.Webhook != "" && o.Allow.Webhook != n.Webhook {
		errs = append(errs, fmt.Errorf("CAIRN_NOTIFY_WEBHOOK %q is not the Outbox's Allow.Webhook %q: the sender allows one webhook", n.Webhook, o.Allow.Webhook))
	}
	if o := c.Outbox; o != nil {
		if o.JS != nil || !o.Space.IsDefault() || o.Stream != "" || o.Consumer != "" || o.Bucket != "" {
			errs = append(errs, errors.New("Outbox: JS, Space, Stream, Consumer and Bucket are the pipeline's own: leave them zero"))
		}
		if o.Transport == nil {
			errs = append(errs, errors.New("Outbox: no Transport (an outbox.SMTPTransport, a WebhookTransport or both through outbox.Routed)"))
		}
	}
	if !withSteps {
		return errors.Join(errs...)
	}
	for _, name := range c.Pipeline.Names() {
		if c.Steps[name] == nil {
			errs = append(errs, fmt.Errorf("step %q has no implementation in Steps", name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Steps)) {
		if _, ok := c.Pipeline.Step(name); !ok {
			errs = append(errs, fmt.Errorf("Steps has %q, which is no step of pipeline %q (%v)", name, c.Pipeline.Name, c.Pipeline.Names()))
		}
	}
	return errors.Join(errs...)
}

// Init creates every missing asset of the pipeline, checks the existing ones, and registers
// every service's signing key (making the missing seeds in KeysDir), and registers the
// pipeline in BucketPipelines: the administrator's work, before any service runs. It needs no
// Steps (with them, the registration names the steps that count their progress).
func Init(ctx context.Context, c Config) error {
	c = c.withJob()
	if err := c.validate(false); err != nil {
		return err
	}
	if err := assets.Ensure(ctx, c.JS, c.Assets()); err != nil {
		return err
	}
	if _, err := identity.RegisterSeeds(ctx, c.JS, c.Space(), c.KeysDir, c.Services()...); err != nil {
		return err
	}
	return register(ctx, c)
}

// Host is what every service of a pipeline's process shares: its checkpoints (signed by each
// service's key), artifacts, buckets and the registered keys. Open it once; Service gives each
// service's loop. It is the one place the framework's services are made: Run uses it, and so
// does the reference night's process (internal/service).
type Host struct {
	c         Config
	store     *kc.Store
	artifacts *artifacts.Store
	handovers jetstream.KeyValue
	marks     jetstream.KeyValue
	memo      jetstream.KeyValue
	natural   jetstream.KeyValue
	ring      *identity.Ring
	limits    map[string]*ratelimit.Limiter // by the setting a step's RateLimit names
}

// Handles are the host's handles a pipeline's own code may need beside its steps (the
// reversal of a system that reads the record or the outbox marks).
type Handles struct {
	JS    jetstream.JetStream
	Space assets.Space
	Store *kc.Store // signing as the service that asked (the compensator's, for SystemsOf)
	Marks jetstream.KeyValue
	Memo  jetstream.KeyValue
	Now   func() time.Time
}

// Run runs the named services (every one without names) until ctx ends: it checks the
// assets (run Init first), reads each service's seed from KeysDir, and returns nil on a
// clean stop (ctx's end, during the start-up too), or the first service's error that stopped
// by itself (the others are stopped).
func Run(ctx context.Context, c Config, services ...string) error {
	c = c.withJob()
	for _, s := range services {
		if !slices.Contains(c.Services(), s) {
			return fmt.Errorf("no service %q in pipeline %q (%v)", s, c.Pipeline.Name, c.Services())
		}
	}
	h, err := Open(ctx, c)
	if err != nil {
		return stoppedWhileStarting(ctx, err)
	}
	c = h.c
	if len(services) == 0 {
		services = c.Services()
	}
	loops := make(map[string]func(context.Context) error, len(services))
	for _, s := range services {
		if loops[s], err = h.Service(s); err != nil {
			return stoppedWhileStarting(ctx, err)
		}
	}
	var ended atomic.Pointer[error] // the first service that stopped by itself
	if err := h.serve(ctx, &ended); err != nil {
		return stoppedWhileStarting(ctx, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range services {
		g.Go(func() error {
			err := loops[s](gctx)
			switch {
			case err != nil:
				err = fmt.Errorf("service %s: %w", s, err)
			case ctx.Err() == nil && gctx.Err() == nil:
				err = fmt.Errorf("service %s stopped by itself", s)
			}
			if err != nil && ctx.Err() == nil {
				ended.CompareAndSwap(nil, &err) // unready for good
			}
			return err
		})
	}
	return g.Wait()
}

// serve serves the metrics and the readiness on Config.MetricsAddr until ctx ends; ended is
// the first service that stopped by itself (the process is unready for good then).
func (h *Host) serve(ctx context.Context, ended *atomic.Pointer[error]) error {
	c := h.c
	if c.MetricsAddr == "" {
		return nil
	}
	c.Metrics.SetReady(func() error {
		switch {
		case ended.Load() != nil:
			return *ended.Load()
		case ctx.Err() != nil:
			return errors.New("stopping")
		case c.JS.Conn().Status() != nats.CONNECTED:
			return fmt.Errorf("the NATS connection is %s", strings.ToLower(c.JS.Conn().Status().String()))
		}
		return nil
	})
	addr, err := c.Metrics.Listen(ctx, c.MetricsAddr, c.Logger)
	if err != nil {
		return fmt.Errorf("CAIRN_METRICS_ADDR: %w", err)
	}
	c.Logger.Info("serving metrics", slog.String("pipeline", c.Pipeline.Name), slog.String("url", "http://"+addr.String()+"/metrics"),
		slog.String("readiness", "http://"+addr.String()+"/readyz"))
	if c.Serving != nil {
		c.Serving(addr)
	}
	return nil
}

// Open checks the configuration (the steps' implementations included) and the assets (run
// Init first), and opens what every service of the process shares.
func Open(ctx context.Context, c Config) (*Host, error) {
	c = c.withJob()
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if err := c.validate(true); err != nil {
		return nil, err
	}
	if err := assets.Check(ctx, c.JS, c.Assets()); err != nil {
		return nil, fmt.Errorf("checking the NATS assets (run app.Init): %w", err)
	}
	h := &Host{c: c}
	var err error
	if h.ring, err = identity.OpenRing(ctx, c.JS, c.Space()); err != nil {
		return nil, fmt.Errorf("the signing keys (run app.Init): %w", err)
	}
	if h.store, err = kc.Open(ctx, c.JS, c.Space().Bucket(assets.BucketRuns), kc.WithClock(func() time.Time { return c.Now() }), kc.WithRing(h.ring), kc.WithPipeline(c.Pipeline.Names())); err != nil {
		return nil, err
	}
	if h.limits, err = openLimits(ctx, c); err != nil {
		return nil, err
	}
	if h.artifacts, err = artifacts.Open(ctx, c.JS, c.Space().Bucket(assets.ObjectArtifacts)); err != nil {
		return nil, err
	}
	h.store = h.store.Moving(h.artifacts.SaveObject) // every writer: the budget's room lent (kvcheckpoint)
	for name, kv := range map[string]*jetstream.KeyValue{assets.BucketHandovers: &h.handovers, assets.BucketOutbox: &h.marks, assets.BucketMemo: &h.memo, assets.BucketNaturalKeys: &h.natural} {
		name = c.Space().Bucket(name)
		if *kv, err = c.JS.KeyValue(ctx, name); err != nil {
			return nil, fmt.Errorf("looking up bucket %s: %w", name, err)
		}
	}
	c.Metrics.Once("cairn_cas_conflicts_total", "Checkpoint compare-and-set writes refused because another writer changed the record first.", true,
		func() float64 { return float64(h.store.Conflicts()) })
	return h, nil
}

// Service makes service name's loop, which runs until ctx ends: a step's runner, the
// supervisor, the outbox sender or the compensator. Its signing key is read now, so a
// missing one is found before anything runs.
func (h *Host) Service(name string) (func(context.Context) error, error) {
	if !slices.Contains(h.c.Services(), name) {
		return nil, fmt.Errorf("no service %q in pipeline %q (%v)", name, h.c.Pipeline.Name, h.c.Services())
	}
	sg, err := h.signer(name)
	if err != nil {
		return nil, err
	}
	switch name {
	case Supervisor:
		return loop(h.supervisor(sg))
	case OutboxSender:
		return loop(h.outboxSender(sg))
	case Compensator:
		return loop(h.compensator(sg))
	}
	return loop(h.step(name, sg))
}

// loop is a made service's loop, or the error that made none.
func loop[S interface{ Run(context.Context) error }](s S, err error) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return s.Run, nil
}

// signer is service name's signing key: Config.Signers', else its seed in KeysDir.
func (h *Host) signer(name string) (*identity.Signer, error) {
	if sg := h.c.Signers[name]; sg != nil {
		return sg, nil
	}
	sg, err := identity.SignerFrom(h.c.KeysDir, name)
	if err != nil {
		return nil, fmt.Errorf("KeysDir %s: %w (run app.Init)", h.c.KeysDir, err)
	}
	return sg, nil
}

// ended is the runner's Ended for service name.
func (h *Host) ended(name string) func(error) {
	if h.c.Ended == nil {
		return nil
	}
	return func(err error) { h.c.Ended(name, err) }
}

func (h *Host) step(step string, sg *identity.Signer) (*runner.Runner, error) {
	c := h.c
	store := h.store.As(sg)
	def, _ := c.Pipeline.Step(step)
	return runner.New(runner.Config{
		JS: c.JS, Space: c.Space(), Store: store, Artifacts: h.artifacts, Handovers: h.handovers, Memo: h.memo, Limit: h.limits[def.RateLimit], Pipeline: c.Pipeline,
		StepName: step, Step: c.Steps[step], Approval: slices.Contains(c.ApprovalSteps, step), Notify: h.notifyAs(step, sg), Heartbeat: c.Heartbeat,
		Lease: c.Lease, TakeoverGap: c.TakeoverGap, RetryAttempts: c.RetryAttempts, LoopGuard: c.LoopGuard, ParkLimit: c.ParkLimit,
		MaxDeliver: c.MaxDeliver, CodeVersion: c.CodeVersion, Concurrency: c.Concurrency, StopGrace: c.StopGrace,
		Faults: c.Faults, Now: c.Now, Metrics: c.Metrics, Logger: c.Logger.With(slog.String("service", step)),
		// A run whose steps queued no message is done at once; one with messages stays
		// finishing until the outbox sender marks the last of them sent (outboxSender).
		Finishing: h.settleAs(store), Ended: h.ended(step),
	})
}

func (h *Host) supervisor(sg *identity.Signer) (*supervisor.Supervisor, error) {
	c := h.c
	return supervisor.New(supervisor.Config{
		JS: c.JS, Space: c.Space(), Store: h.store.As(sg), Approvers: h.ring, Marks: h.marks, Handovers: h.handovers,
		NaturalKeys: h.natural, Pipeline: c.Pipeline, Lease: c.Lease, Heartbeat: c.Heartbeat, TakeoverGap: c.TakeoverGap,
		StallTimeout: c.StallTimeout, OutboxStall: c.OutboxStall, ApprovalTimeout: c.ApprovalTimeout, ReassignLimit: c.ReassignLimit,
		Notify: h.notifyAs(Supervisor, sg), Now: c.Now, Metrics: c.Metrics, Faults: c.Faults,
		Logger: c.Logger.With(slog.String("service", Supervisor)),
	})
}

// compensator is the pipeline's compensator on its space's undo commands (Systems,
// SystemsOf).
func (h *Host) compensator(sg *identity.Signer) (*undo.Compensator, error) {
	c := h.c
	store := h.store.As(sg)
	systems := maps.Clone(c.Systems)
	if systems == nil {
		systems = map[string]undo.System{}
	}
	if c.SystemsOf != nil {
		more, err := c.SystemsOf(Handles{JS: c.JS, Space: c.Space(), Store: store, Marks: h.marks, Memo: h.memo, Now: c.Now})
		if err != nil {
			return nil, err
		}
		maps.Copy(systems, more)
	}
	if c.Outbox != nil && systems[saga.Mail] == nil {
		systems[saga.Mail] = undo.Mail{JS: c.JS, Space: c.Space(), Marks: h.marks, Store: store, Now: c.Now}
	}
	return undo.New(undo.Config{
		JS: c.JS, Space: c.Space(), Store: store, Systems: systems, Handovers: h.handovers, Heartbeat: c.Heartbeat,
		TakeoverGap: c.TakeoverGap, Faults: c.Faults, Now: c.Now, RetryAttempts: c.RetryAttempts,
		Logger: c.Logger, // undo.New names the service
	})
}

// settleAs moves a finishing run to done, by store's signer, once none of its messages is
// left to deliver (supervisor.Settle).
func (h *Host) settleAs(store *kc.Store) func(ctx context.Context, runID string) {
	c := h.c
	return func(ctx context.Context, runID string) {
		if _, err := supervisor.Settle(ctx, c.JS, c.Space(), store, h.marks, runID, c.Now); err != nil {
			c.Logger.Warn("settling run", slog.String("run_id", runID), slog.Any("error", err))
		}
	}
}

// noticeFrom is the address notices are sent as: Notices.From, else the Outbox's, else
// DefaultFrom.
func (c Config) noticeFrom() string {
	switch {
	case c.Notices.From != "":
		return c.Notices.From
	case c.Outbox != nil && c.Outbox.Allow.From != "":
		return c.Outbox.Allow.From
	}
	return DefaultFrom
}

// notifyAs is the Notify of service name, whose key is sg: its notices signed by it (nil
// without notices).
func (h *Host) notifyAs(name string, sg *identity.Signer) func(ctx context.Context, kind string, note runner.HandoverNote, generation int, token uint64) {
	c := h.c
	return c.Notices.Notifier(c.JS, c.Space(), sg, c.noticeFrom(), c.Now, c.Logger.With(slog.String("service", name)))
}

// outboxSender is the pipeline's outbox sender on its space's outbox (Config.Outbox), which
// also delivers the notices (Config.Notices).
func (h *Host) outboxSender(sg *identity.Signer) (*outbox.Sender, error) {
	c := h.c
	var oc outbox.SenderConfig
	if c.Outbox != nil {
		oc = *c.Outbox
	}
	oc.JS, oc.Space = c.JS, c.Space()
	if oc.Timeout == 0 && c.AckWait > 0 {
		// A turn ends well inside the durable's ack wait, so a delivery that hangs is given
		// up by this sender, never handed to a second one while it still runs.
		oc.Timeout = c.AckWait * 2 / 3
	}
	if n := c.Notices; n.Any() {
		n.From = c.noticeFrom()
		route := noticeRoute{mail: n.Mail, rest: oc.Transport}
		if n.Webhook != "" {
			// The call gets half of the sender's turn, the marks the rest.
			route.webhook = outbox.WebhookTransport{URL: n.Webhook, Secret: n.Secret, Now: c.Now, Client: &http.Client{Timeout: cmp.Or(oc.Timeout/2, 10*time.Second)}}
		}
		if route.mail == nil {
			route.mail = oc.Transport
		}
		oc.Transport, oc.Allow = route, n.allow(oc.Allow)
	}
	if oc.Logger == nil {
		oc.Logger = c.Logger.With(slog.String("service", OutboxSender))
	}
	if oc.Faults == nil {
		oc.Faults = c.Faults
	}
	if oc.Admit == nil {
		oc.Admit = outbox.RecordAdmission(h.store)
	}
	if oc.Trust == nil {
		oc.Trust = &outbox.Trust{}
	}
	if oc.Trust.Ring == nil {
		trust := *oc.Trust
		trust.Ring = h.ring
		oc.Trust = &trust
	}
	oc.Transport = countingTransport{oc.Transport, c.Metrics}
	timeline := audit.New(c.JS, OutboxSender, c.Now).In(c.Space())
	settle := h.settleAs(h.store.As(sg))
	marked, refused, rejected, dropped := oc.Marked, oc.Refused, oc.Rejected, oc.Dropped
	oc.Marked = func(ctx context.Context, runID string) {
		if marked != nil {
			marked(ctx, runID)
		}
		settle(ctx, runID)
	}
	oc.Dropped = func(ctx context.Context, m outbox.Message, reason string) {
		c.Metrics.Outbox.WithLabelValues("dropped").Inc()
		c.Logger.Warn("outbox message dropped", slog.String("service", OutboxSender), slog.String("run_id", m.RunID), slog.String("key", m.Key), slog.String("reason", reason))
		_ = timeline.Record(ctx, events.AuditItemID(m.RunID, m.Step, "outbox.dropped", m.Token, m.Key, 0),
			events.Audit{RunID: m.RunID, Step: m.Step, Event: "outbox.dropped", Token: m.Token, Item: m.Key, Detail: reason})
		if dropped != nil {
			dropped(ctx, m, reason)
		}
	}
	// The supervisor hands the run over naming the message and this error.
	oc.Refused = func(ctx context.Context, m outbox.Message, err error) {
		c.Metrics.Outbox.WithLabelValues("refused").Inc()
		_ = timeline.Record(ctx, events.AuditItemID(m.RunID, m.Step, supervisor.EventOutboxRefused, m.Token, m.Key, int(m.Requeue)),
			events.Audit{RunID: m.RunID, Step: m.Step, Event: supervisor.EventOutboxRefused, Token: m.Token, Item: m.Key, Detail: clip(err.Error(), 400)})
		if refused != nil {
			refused(ctx, m, err)
		}
	}
	oc.Rejected = func(ctx context.Context, m jetstream.Msg, reason error) {
		c.Metrics.Outbox.WithLabelValues("rejected").Inc()
		var seq uint64
		if meta, err := m.Metadata(); err == nil {
			seq = meta.Sequence.Stream
		}
		stream := c.Space().Stream(assets.StreamOutbox)
		nm := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		_ = timeline.Reject(ctx, events.RejectedID(stream, seq), "", events.NewRejected(stream, seq, nm, reason.Error()))
		if rejected != nil {
			rejected(ctx, m, reason)
		}
	}
	s, err := outbox.NewSender(oc)
	if err != nil {
		return nil, fmt.Errorf("Outbox: %w", err)
	}
	c.Metrics.Once("cairn_outbox_backlog", "Outbox messages not yet sent (pending and unacknowledged on the outbox-sender consumer).", false, h.outboxBacklog)
	return s, nil
}

// outboxBacklog reads the outbox sender's durable's backlog at scrape time; -1 when it
// cannot.
func (h *Host) outboxBacklog() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sp := h.c.Space()
	cons, err := h.c.JS.Consumer(ctx, sp.Stream(assets.StreamOutbox), assets.ConsumerOutbox)
	if err != nil {
		return -1
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return -1
	}
	return float64(info.NumPending) + float64(info.NumAckPending)
}

// countingTransport counts the messages handed to the outside system.
type countingTransport struct {
	outbox.Transport
	m *metrics.Metrics
}

func (t countingTransport) Deliver(ctx context.Context, m outbox.Message, raw []byte) error {
	err := t.Transport.Deliver(ctx, m, raw)
	if err == nil {
		t.m.Outbox.WithLabelValues("sent").Inc()
	}
	return err
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// openLimits opens the shared rate limit of every step that declares one (RateLimit) found in
// Limits, once a limit, for its runner (runner.Config.Limit).
func openLimits(ctx context.Context, c Config) (map[string]*ratelimit.Limiter, error) {
	out := map[string]*ratelimit.Limiter{}
	for _, s := range c.Pipeline.Steps {
		l, ok := c.Limits[s.RateLimit]
		if s.RateLimit == "" || !ok || out[s.RateLimit] != nil {
			continue
		}
		lim, err := ratelimit.New(ctx, ratelimit.Config{JS: c.JS, Limit: l})
		if err != nil {
			return nil, fmt.Errorf("the rate limit %s of step %s: %w (run app.Init)", s.RateLimit, s.Name, err)
		}
		out[s.RateLimit] = lim
	}
	return out, nil
}
