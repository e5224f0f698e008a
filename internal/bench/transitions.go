package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/eventually"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// TransitionsConfig says what Transitions measures.
type TransitionsConfig struct {
	Runs        int  // K runs; default 1000
	Concurrency int  // C runs in flight, and messages each step runner handles at once; default 16
	Steps       int  // S steps a run; default 10
	SyncAlways  bool // sync_interval: always
	// Cluster is 1 (default, one server), or 3: three servers clustered on loopback, every
	// stream, bucket and consumer with 3 replicas (the floor's too).
	Cluster    int
	OutputSize int // bytes of each step's output; default 200
	// Separate gives each step runner a connection and a store of its own, as a deployment
	// of one service per step: a step then reads the record its predecessor wrote, and
	// checks its signature, where one process's runners share the record they remember
	// writing (the default, as `cairn dev` and one process hosting every step).
	Separate bool
	// Dir holds the servers' storage; default a temporary folder, removed afterwards.
	Dir     string
	Timeout time.Duration // for each of the two measurements; default 10m
	// Profile, when set, is called with the measured part of Cairn's run (not the floor's):
	// it starts a profile and returns the function that stops it.
	Profile func() (stop func())
}

func (c TransitionsConfig) withDefaults() TransitionsConfig {
	c.Runs = cmp.Or(c.Runs, 1000)
	c.Concurrency = cmp.Or(c.Concurrency, 16)
	c.Steps = cmp.Or(c.Steps, 10)
	c.OutputSize = cmp.Or(c.OutputSize, 200)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Minute)
	c.Cluster = cmp.Or(c.Cluster, 1)
	return c
}

func (c TransitionsConfig) validate() error {
	var errs []error
	if c.Runs < 1 || c.Concurrency < 1 || c.Steps < 1 {
		errs = append(errs, fmt.Errorf("runs (%d), concurrency (%d) and steps (%d) must be at least 1", c.Runs, c.Concurrency, c.Steps))
	}
	if c.Cluster != 1 && c.Cluster != 3 {
		errs = append(errs, fmt.Errorf("cluster (%d): 1 server, or 3", c.Cluster))
	}
	if c.Steps > 99 {
		errs = append(errs, fmt.Errorf("steps (%d): at most 99", c.Steps))
	}
	if c.Concurrency > 1000 {
		errs = append(errs, fmt.Errorf("concurrency (%d): at most 1000, the step consumers' max ack pending", c.Concurrency))
	}
	if c.OutputSize < 64 || c.OutputSize > artifacts.InlineMax {
		errs = append(errs, fmt.Errorf("output size (%d) must be 64 to %d bytes, an inline output", c.OutputSize, artifacts.InlineMax))
	} else if err := finishedFits(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// finishedFits checks that a finished run's record, every output inline, fits a checkpoint.
func finishedFits(c TransitionsConfig) error {
	if _, err := recordSizes(c.Steps, c.OutputSize); err != nil {
		return fmt.Errorf("%d steps of %d-byte outputs: %w", c.Steps, c.OutputSize, err)
	}
	return nil
}

// recordSizes are the sizes of a bench run's record as it is created (0) and after each
// step's commit (1 to steps), as the runner writes them.
func recordSizes(steps, outputSize int) ([]int, error) {
	def := benchPipeline(steps)
	r := kc.New("bench-000000", kc.StringParams(false, "warehouse", "bench", "date", "2026-10-13"), def.Names(), time.Now().UTC().Format(time.RFC3339))
	r.Epoch = "e0000000"
	b, err := kc.Encode(r)
	if err != nil {
		return nil, err
	}
	sizes := []int{len(b)}
	for i, name := range def.Names() {
		out, _ := noop{size: outputSize}.Run(context.Background(), &runner.Attempt{RunID: r.RunID, Step: name})
		s := r.Step(name)
		s.Status, s.Output = kc.Verified, &kc.Output{Inline: out.Output, Digest: artifacts.Digest(out.Output), Size: int64(len(out.Output))}
		s.FinishedAt, s.Token, s.Versions.Code = kc.Ptr(time.Now().UTC().Format(time.RFC3339Nano)), kc.Ptr(uint64(100000+i)), kc.Ptr("v0.1.0")
		r.NextAction = "run step " + name + " of " + r.RunID
		if i == steps-1 {
			r.Status = kc.Finishing
		}
		if b, err = kc.Encode(r); err != nil {
			return nil, err
		}
		sizes = append(sizes, len(b))
	}
	return sizes, nil
}

// TransitionsResult is one measurement of durable step transitions and the raw floor.
type TransitionsResult struct {
	Runs        int  `json:"runs"`
	Concurrency int  `json:"concurrency"`
	Steps       int  `json:"steps"`
	SyncAlways  bool `json:"sync_always"`
	Nodes       int  `json:"nodes"`              // servers: 1, or 3 clustered (replicas 3)
	Separate    bool `json:"separate,omitempty"` // a connection and a store per step runner
	// Transitions are the step commits measured: runs × steps.
	Transitions int     `json:"transitions"`
	WallSeconds float64 `json:"wall_seconds"`
	PerSecond   float64 `json:"transitions_per_second"`
	// CPUMicros is the CPU time per transition, server and runners together (they share the
	// process): a figure that holds on a busy machine, where wall time does not.
	CPUMicros       float64 `json:"cpu_us_per_transition"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	CheckpointBytes int     `json:"checkpoint_bytes"` // a finished run's record
	Conflicts       int64   `json:"cas_conflicts"`
	// Stored is what the run stored per transition (the floor stores 1 + 1/S checkpoint
	// writes and 1 message).
	Stored Stored `json:"stored_per_transition"`
	// Floor is the raw floor measured before and after, together.
	Floor       Floor `json:"raw_floor"`
	FloorBefore Floor `json:"raw_floor_before"`
	FloorAfter  Floor `json:"raw_floor_after"`
	// FloorRecordSized is the floor with values the size of Cairn's record at each step
	// (context: the targets are against Floor, whose values are OutputSize bytes).
	FloorRecordSized Floor `json:"raw_floor_record_sized"`
	// OneWrite, GroupCommit and Sharded are ceilings, not floors, with record-sized values:
	// a KV compare-and-set alone per transition, plain (the most a design paying one synced
	// write a transition to one bucket could reach), committed in atomic batches of the
	// concurrent ones (what sharing syncs that way could reach), and spread over Shards
	// buckets (what splitting the checkpoint bucket could reach: the server syncs a stream's
	// writes one after another, the disk several streams' at once). They say which lever
	// could pay on these servers. Measured on one server only.
	OneWrite    Floor `json:"ceiling_one_write"`
	GroupCommit Floor `json:"ceiling_group_commit"`
	Sharded     Floor `json:"ceiling_sharded"`
	// Ratio is PerSecond over the floor's.
	Ratio float64 `json:"ratio_to_floor"`
}

// Stored counts the messages a measurement stored per transition, by stream. Each run's
// start is included: its checkpoint's create and its first step's event.
type Stored struct {
	Checkpoints float64 `json:"checkpoints"`  // cairn-runs
	StepEvents  float64 `json:"step_events"`  // CAIRN_STEPS
	AuditEvents float64 `json:"audit_events"` // CAIRN_AUDIT
	// ArtifactMessages are the object store's (chunks and metadata): outputs the budget
	// moved out of the record.
	ArtifactMessages float64 `json:"artifact_messages"`
}

// Transitions runs K runs of an S-step pipeline of no-op steps through the real step
// runner, C runs in flight, then the raw floor with the same server settings.
func Transitions(ctx context.Context, c TransitionsConfig) (res TransitionsResult, err error) {
	c = c.withDefaults()
	res = TransitionsResult{Runs: c.Runs, Concurrency: c.Concurrency, Steps: c.Steps, SyncAlways: c.SyncAlways, Nodes: c.Cluster, Separate: c.Separate, Transitions: c.Runs * c.Steps}
	if err := c.validate(); err != nil {
		return res, fmt.Errorf("bench transitions: %w", err)
	}
	dir, keep, err := workDir(c.Dir, "cairn-bench-transitions-")
	if err != nil {
		return res, err
	}
	defer keep(&err)
	// The floor is measured right before and right after Cairn, on servers of their own, so
	// that a machine that speeds up or slows down meanwhile (other work, the disk) tilts
	// neither side; the reference is the two together.
	fc := FloorConfig{Runs: c.Runs, Concurrency: c.Concurrency, Steps: c.Steps, SyncAlways: c.SyncAlways, Nodes: c.Cluster, ValueSize: c.OutputSize, Timeout: c.Timeout}
	fc.Dir = filepath.Join(dir, "floor-before")
	if res.FloorBefore, err = RawFloor(ctx, fc); err != nil {
		return res, err
	}
	if err := cairnTransitions(ctx, c, filepath.Join(dir, "cairn"), &res); err != nil {
		return res, err
	}
	res.PeakRSSBytes = selfPeakRSS()
	fc.Dir = filepath.Join(dir, "floor-after")
	if res.FloorAfter, err = RawFloor(ctx, fc); err != nil {
		return res, err
	}
	res.Floor = res.FloorBefore.join(res.FloorAfter)
	if res.Floor.PerSecond > 0 {
		res.Ratio = res.PerSecond / res.Floor.PerSecond
	}
	// For context, not the target: the floor writing the very bytes Cairn writes, a value
	// the size of the run's record at each step.
	if fc.ValueSizes, err = recordSizes(c.Steps, c.OutputSize); err != nil {
		return res, err
	}
	fc.Dir = filepath.Join(dir, "floor-record-sized")
	if res.FloorRecordSized, err = RawFloor(ctx, fc); err != nil {
		return res, err
	}
	if c.Cluster > 1 {
		// Not on three servers: a new clustered stream changed to take atomic batches
		// answered "no response from stream" for a while; the ceilings are one node's.
		return res, nil
	}
	fc.Shape, fc.Dir = CASOnly, filepath.Join(dir, "ceiling-one-write")
	if res.OneWrite, err = RawFloor(ctx, fc); err != nil {
		return res, err
	}
	fc.Shape, fc.Dir = GroupCommit, filepath.Join(dir, "ceiling-group-commit")
	if res.GroupCommit, err = RawFloor(ctx, fc); err != nil {
		return res, err
	}
	fc.Shape, fc.Dir = CASSharded, filepath.Join(dir, "ceiling-sharded")
	if res.Sharded, err = RawFloor(ctx, fc); err != nil {
		return res, err
	}
	return res, nil
}

// benchPipeline is S lease-free no-op steps, s01 to sNN.
func benchPipeline(steps int) pipeline.Definition {
	d := pipeline.Definition{Name: "bench"}
	for i := 1; i <= steps; i++ {
		d.Steps = append(d.Steps, pipeline.Step{Name: fmt.Sprintf("s%02d", i), Kind: pipeline.Compute, Recovery: "a no-op, repeated freely"})
	}
	return d
}

// noop is a step that does nothing and returns an output of a fixed size naming its run.
type noop struct {
	size int
}

func (n noop) Run(_ context.Context, a *runner.Attempt) (*runner.Result, error) {
	head := `{"run":"` + a.RunID + `","step":"` + a.Step + `","pad":"`
	pad := max(n.size-len(head)-2, 0)
	return &runner.Result{Output: []byte(head + strings.Repeat("x", pad) + `"}`)}, nil
}

func cairnTransitions(ctx context.Context, c TransitionsConfig, dir string, res *TransitionsResult) error {
	srvs, err := startNodes(dir, c.SyncAlways, c.Cluster)
	if err != nil {
		return err
	}
	defer srvs.shutdown()
	nc, js, err := connectURL(srvs.url(), "cairn-bench")
	if err != nil {
		return err
	}
	defer nc.Close()
	def := benchPipeline(c.Steps)
	// A new cluster's JetStream may refuse the first requests (no leader yet); a mismatch is
	// never retried.
	var mismatch error
	err = eventually.Within(30*time.Second, func() error {
		err := assets.Ensure(ctx, js, assets.Config{Steps: def.Names(), Replicas: c.Cluster})
		if errors.Is(err, assets.ErrMismatch) {
			mismatch = err
			return nil
		}
		return err
	})
	if mismatch != nil {
		return mismatch
	}
	if err != nil {
		return err
	}
	if err := eventually.Within(30*time.Second, func() error { return streamsLed(ctx, js) }); err != nil {
		return err
	}
	// Every record signed by its writer and checked by its reader, as in a deployment.
	signers, ring, err := benchSigners(def.Names())
	if err != nil {
		return err
	}
	open := func(js jetstream.JetStream) (stepDeps, error) {
		store, err := kc.Open(ctx, js, assets.BucketRuns, kc.WithRing(ring), kc.WithRoles(kc.Roles{
			Supervisor: "bench", StepService: func(step string) string { return "bench-" + step }}))
		if err != nil {
			return stepDeps{}, err
		}
		art, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
		if err != nil {
			return stepDeps{}, err
		}
		handovers, err := js.KeyValue(ctx, assets.BucketHandovers)
		if err != nil {
			return stepDeps{}, err
		}
		return stepDeps{js: js, store: store, art: art, handovers: handovers}, nil
	}
	shared, err := open(js)
	if err != nil {
		return err
	}
	starter := shared.store.As(signers["bench"])
	stores := []*kc.Store{shared.store}

	// C runs in flight: a slot is taken before a run starts and freed when its last step
	// moves it to finishing.
	slots := make(chan struct{}, c.Concurrency)
	var finished atomic.Int64
	var seen sync.Map
	all := make(chan struct{})
	finishing := func(_ context.Context, runID string) {
		if _, again := seen.LoadOrStore(runID, true); again {
			return
		}
		<-slots
		if finished.Add(1) == int64(c.Runs) {
			close(all)
		}
	}
	rctx, stopRunners := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan error, len(def.Steps))
	for _, s := range def.Steps {
		d := shared
		if c.Separate {
			snc, sjs, err := connectURL(srvs.url(), "cairn-bench-"+s.Name)
			if err != nil {
				stopRunners()
				return err
			}
			defer snc.Close()
			if d, err = open(sjs); err != nil {
				stopRunners()
				return err
			}
			stores = append(stores, d.store)
		}
		r, err := runner.New(runner.Config{
			JS: d.js, Store: d.store.As(signers["bench-"+s.Name]), Artifacts: d.art, Handovers: d.handovers, Pipeline: def, StepName: s.Name,
			Step: noop{size: c.OutputSize}, Service: "bench-" + s.Name, Concurrency: c.Concurrency,
			Finishing: finishing, StopGrace: time.Second,
		})
		if err != nil {
			stopRunners()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(rctx); err != nil {
				errc <- err
			}
		}()
	}
	defer func() { stopRunners(); wg.Wait() }()

	first := def.Steps[0].Name
	var stop func()
	if c.Profile != nil {
		stop = c.Profile()
	}
	began, cpu := time.Now(), cpuTime()
	deadline := time.NewTimer(c.Timeout)
	defer deadline.Stop()
	for i := range c.Runs {
		select {
		case slots <- struct{}{}:
		case err := <-errc:
			return err
		case <-deadline.C:
			return fmt.Errorf("bench transitions: %d of %d runs finished within %s", finished.Load(), c.Runs, c.Timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
		runID := fmt.Sprintf("bench-%06d", i+1)
		rev, err := starter.Create(ctx, kc.New(runID, kc.StringParams(false, "warehouse", "bench", "date", "2026-10-13"), def.Names(), began.UTC().Format(time.RFC3339)))
		if err != nil {
			return fmt.Errorf("starting run %s: %w", runID, err)
		}
		if err := stepevent.Publish(ctx, js, assets.Default, "/cairn/bench", runID, first, 0, rev, time.Now()); err != nil {
			return fmt.Errorf("starting run %s: %w", runID, err)
		}
	}
	select {
	case <-all:
	case err := <-errc:
		return err
	case <-deadline.C:
		return fmt.Errorf("bench transitions: %d of %d runs finished within %s", finished.Load(), c.Runs, c.Timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	took := time.Since(began)
	res.CPUMicros = float64((cpuTime() - cpu).Microseconds()) / float64(res.Transitions)
	if stop != nil {
		stop()
	}
	res.WallSeconds = took.Seconds()
	res.PerSecond = float64(res.Transitions) / took.Seconds()
	for _, st := range stores {
		res.Conflicts += st.Conflicts()
	}
	if res.Stored, err = stored(ctx, js, res.Transitions); err != nil {
		return err
	}
	return checkRuns(ctx, shared.store, c.Runs, def, res)
}

// stored counts what the streams hold, written or since removed, per transition.
func stored(ctx context.Context, js jetstream.JetStream, transitions int) (Stored, error) {
	var n [4]uint64
	for i, name := range []string{"KV_" + assets.BucketRuns, assets.StreamSteps, assets.StreamAudit, "OBJ_" + assets.ObjectArtifacts} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return Stored{}, fmt.Errorf("counting what %s stored: %w", name, err)
		}
		n[i] = s.CachedInfo().State.LastSeq
	}
	per := func(v uint64) float64 { return float64(v) / float64(transitions) }
	return Stored{Checkpoints: per(n[0]), StepEvents: per(n[1]), AuditEvents: per(n[2]), ArtifactMessages: per(n[3])}, nil
}

// checkRuns confirms every run finished with every step verified once, and measures a
// finished record.
func checkRuns(ctx context.Context, store *kc.Store, runs int, def pipeline.Definition, res *TransitionsResult) error {
	for i := range runs {
		runID := fmt.Sprintf("bench-%06d", i+1)
		e, err := store.KV().Get(ctx, runID)
		if err != nil {
			return fmt.Errorf("checking run %s: %w", runID, err)
		}
		// Read as the steps read it (sum, invariants, epoch, signature), and with the
		// bench's pipeline, which the measured store is not told of.
		rec, err := store.DecodeEntry(ctx, runID, e.Value(), e.Revision())
		if err == nil {
			err = rec.Check(runID, def.Names())
		}
		if err != nil {
			return fmt.Errorf("checking run %s: %w", runID, err)
		}
		if rec.Status != kc.Finishing || !rec.AllVerified() || rec.Restarts != 0 {
			return fmt.Errorf("run %s ended %s with restarts %d, steps verified %t", runID, rec.Status, rec.Restarts, rec.AllVerified())
		}
		res.CheckpointBytes = max(res.CheckpointBytes, len(e.Value()))
	}
	return nil
}

// benchSigners makes a signer for the bench's starter and for each step's service, and the
// ring of their keys.
func benchSigners(steps []string) (map[string]*identity.Signer, *identity.Ring, error) {
	out := map[string]*identity.Signer{}
	pubs := map[string]string{}
	for _, name := range append([]string{"bench"}, steps...) {
		if name != "bench" {
			name = "bench-" + name
		}
		seed, err := identity.NewSeed()
		if err != nil {
			return nil, nil, err
		}
		sg, err := identity.NewSigner(name, seed)
		if err != nil {
			return nil, nil, err
		}
		out[name], pubs[name] = sg, sg.PublicKey()
	}
	return out, identity.NewRing(pubs, identity.Seal{}), nil
}

// stepDeps are what a step runner is given: its JetStream, the runs' store, the artifact
// store and the handover notes, on one connection.
type stepDeps struct {
	js        jetstream.JetStream
	store     *kc.Store
	art       *artifacts.Store
	handovers jetstream.KeyValue
}
