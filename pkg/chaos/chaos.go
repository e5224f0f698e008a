package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faultmap"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// RunID is the run every trial starts (each trial has a server of its own).
const RunID = "chaos-run"

// ReportFile is the report's name in the chaos folder.
const ReportFile = "report.json"

// Config is one chaos run of a pipeline.
type Config struct {
	Pipeline string   // its name, as its Init registers it
	Bin      string   // its binary: `Bin chaos-sandbox DIR`, `Bin init`, `Bin service`
	Env      []string // every process's environment, on top of this one's
	Dir      string   // the chaos folder: one subfolder per trial, emptied first, and the report
	// Points are the crash points, CAIRN_FAULTS rules; nil: Points of the reference run.
	Points []string
	// Limit bounds each phase of a trial (the run to its crash, the rest of it); default 3m.
	Limit time.Duration
	// Progress, when set, hears of each trial as it ends (the reference's Point is "").
	Progress func(done, of int, r Result)
}

// Result is one trial against the reference.
type Result struct {
	Point       string         `json:"point"`
	Step        string         `json:"step"`   // the step (or service) the point is in
	Fired       bool           `json:"fired"`  // the service process exited at the point
	Status      kc.Status      `json:"status"` // the run's, at its end
	Resumed     []string       `json:"resumed"`
	Duplicates  int            `json:"duplicates"`
	Differences []string       `json:"differences"`
	ExtraCalls  map[string]int `json:"extra_calls"` // by system, beyond the reference's
	TookMS      int64          `json:"took_ms"`
}

// Bad reports whether the trial differs from the reference or its point never fired.
func (r Result) Bad() bool { return len(r.Differences) > 0 || !r.Fired }

// Report is a chaos run's outcome.
type Report struct {
	Pipeline  string    `json:"pipeline"`
	At        time.Time `json:"at"`
	Reference Effects   `json:"reference"`
	Results   []Result  `json:"results"`
}

// Bad is how many trials differ from the reference or did not fire.
func (r Report) Bad() int {
	n := 0
	for _, x := range r.Results {
		if x.Bad() {
			n++
		}
	}
	return n
}

// ReadReport reads the report of the last chaos run in dir.
func ReadReport(dir string) (Report, error) {
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		return Report{}, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("%s: %w", filepath.Join(dir, ReportFile), err)
	}
	return r, nil
}

// Run runs the reference, then one trial per crash point, writes the report in c.Dir and
// returns it. An error is one that stops the whole run (the reference failed, the binary
// is missing); a trial that goes wrong is a Result with its differences.
func Run(ctx context.Context, c Config) (Report, error) {
	if c.Pipeline == "" || c.Bin == "" || c.Dir == "" {
		return Report{}, errors.New("chaos: Pipeline, Bin and Dir are required")
	}
	if c.Limit <= 0 {
		c.Limit = 3 * time.Minute
	}
	rep := Report{Pipeline: c.Pipeline, At: time.Now().UTC()}
	if err := checkPoints(c.Points); err != nil {
		return rep, err
	}
	ref, err := c.trial(ctx, "reference", "")
	if err != nil {
		return rep, fmt.Errorf("the reference run: %w", err)
	}
	if ref.rec.Status != kc.Done {
		return rep, fmt.Errorf("the reference run ended %s (%s), not done: chaos compares with a run that succeeds", ref.rec.Status, handover(ref.rec))
	}
	rep.Reference = ref.effects
	points := c.Points
	if points == nil {
		points = Points(ref.def, ref.keyed, ref.hello.Points)
	}
	if c.Progress != nil {
		c.Progress(0, len(points), Result{Fired: true, Status: ref.rec.Status, TookMS: ref.took.Milliseconds()})
	}
	if err := checkPoints(points); err != nil {
		return rep, err
	}
	for i, p := range points {
		res := Result{Point: p, Step: stepOf(p)}
		t, err := c.trial(ctx, fmt.Sprintf("trial-%02d", i+1), p)
		if err != nil {
			res.Differences = []string{err.Error()}
		} else {
			res.Fired, res.Status, res.Resumed, res.TookMS = t.fired, t.rec.Status, t.resumed, t.took.Milliseconds()
			if t.rec.Status != kc.Done {
				res.Differences = append(res.Differences, fmt.Sprintf("the run ended %s (%s), not done", t.rec.Status, handover(t.rec)))
			}
			d, dup := Diff("effect", t.effects.Effects, ref.effects.Effects)
			res.Differences, res.Duplicates = append(res.Differences, d...), dup
			res.ExtraCalls = extra(t.effects.Calls, ref.effects.Calls)
		}
		rep.Results = append(rep.Results, res)
		if c.Progress != nil {
			c.Progress(i+1, len(points), res)
		}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return rep, err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, ReportFile), b, 0o644); err != nil {
		return rep, fmt.Errorf("writing the report: %w", err)
	}
	return rep, nil
}

// Points are the crash points of a pipeline, from its definition and the keyed writes of its
// reference run by step (its saga: runner.Attempt.Keyed's writes, Attempt.Queue's messages
// among them): the supervisor's, once it wrote the start; each step's before and after its
// commit, and before it publishes the step it alone lets run; for a step that made n keyed
// writes, before the first, a lost reply of the middle one and after the last (numbered in
// one Keyed call: a step that makes several calls may not reach the last); then the
// pipeline's own points (Hello.Points).
func Points(d pipeline.Definition, keyed map[string]int, own []string) []string {
	rule := func(step, point string, n int) string {
		if n > 0 {
			return fmt.Sprintf("%s.%s.%d=exit@once", step, point, n)
		}
		return fmt.Sprintf("%s.%s=exit@once", step, point)
	}
	out := []string{rule(supervisor.FaultPoint, faults.AfterRecord, 0)}
	for _, s := range d.Names() {
		out = append(out, rule(s, faults.BeforeCommit, 0), rule(s, faults.AfterCommit, 0))
		if alone(d, s) {
			out = append(out, rule(s, faults.BeforeNextPublish, 0))
		}
		if n := keyed[s]; n > 0 {
			out = append(out, rule(s, faults.BeforeWrite, 1), rule(s, faults.LostReply, (n+1)/2), rule(s, faults.AfterWrite, n))
		}
	}
	for _, p := range own {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// checkPoints refuses a point that is not a CAIRN_FAULTS rule whose action exits: a trial
// waits for its service process to exit there.
func checkPoints(points []string) error {
	var errs []error
	for _, p := range points {
		fs, err := faults.Parse(p, "")
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("crash point %q: %w", p, err))
		case fs.Empty() || !strings.Contains(p, "=exit"):
			errs = append(errs, fmt.Errorf("crash point %q: a chaos trial crashes the process: give <step>.<point>[.<n>]=exit@once", p))
		}
	}
	return errors.Join(errs...)
}

// alone reports whether a step's commit alone lets another run (one that waits for it and
// nothing else): then that commit publishes the next step's event. A step whose dependents
// also wait for others may not be the one whose commit completes the join.
func alone(d pipeline.Definition, step string) bool {
	for _, n := range d.Names() {
		if w := d.Waits(n); len(w) == 1 && w[0] == step {
			return true
		}
	}
	return false
}

func stepOf(point string) string {
	s, _, _ := strings.Cut(point, ".")
	return s
}

func handover(r *kc.Record) string {
	if r.Handover != nil {
		return *r.Handover
	}
	return "no handover"
}

// Diff compares two lists as multisets, naming each line what (as "effect"): a line missing
// from got, or in it more often than in want (a duplicate, counted).
func Diff(what string, got, want []string) (diffs []string, duplicates int) {
	count := map[string]int{}
	for _, s := range want {
		count[s]++
	}
	for _, s := range got {
		count[s]--
	}
	for _, s := range slices.Sorted(maps.Keys(count)) {
		switch c := count[s]; {
		case c > 0:
			diffs = append(diffs, fmt.Sprintf("%s missing (%d): %s", what, c, clip(s)))
		case c < 0:
			diffs = append(diffs, fmt.Sprintf("%s extra (%d): %s", what, -c, clip(s)))
			duplicates += -c
		}
	}
	return diffs, duplicates
}

// extra is the calls beyond the reference's, by system; nil when none.
func extra(got, want map[string]int) map[string]int {
	var out map[string]int
	for sys, n := range got {
		if d := n - want[sys]; d != 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[sys] = d
		}
	}
	return out
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// trialRun is what one trial left.
type trialRun struct {
	hello   Hello
	def     pipeline.Definition
	rec     *kc.Record
	keyed   map[string]int // the run's keyed writes, by step
	effects Effects
	fired   bool
	resumed []string
	took    time.Duration
}

// trial runs the pipeline once in dir/name with fault ("" for none).
func (c Config) trial(ctx context.Context, name, fault string) (*trialRun, error) {
	dir := filepath.Join(c.Dir, name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	began := time.Now()
	srv, err := app.Embedded("chaos-"+name, "127.0.0.1", -1, filepath.Join(dir, "nats"))
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	hello, sb, err := c.sandbox(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer sb.stop(10 * time.Second)
	env := append(append(append(os.Environ(), c.Env...), hello.Env...), "CAIRN_NATS_URL="+srv.ClientURL())
	t := &trialRun{hello: hello}
	if err := c.initAssets(ctx, dir, env); err != nil {
		return nil, err
	}
	reg, err := app.Registered(ctx, js, c.Pipeline)
	if err != nil {
		return nil, fmt.Errorf("after %s init: %w", filepath.Base(c.Bin), err)
	}
	t.def = reg.Definition()
	svcEnv := env
	if fault != "" {
		svcEnv = append(slices.Clone(env), "CAIRN_FAULTS="+fault)
	}
	svc, err := start(c.Bin, []string{"service"}, svcEnv, filepath.Join(dir, "service-1.log"), false, nil)
	if err != nil {
		return nil, err
	}
	defer func() { svc.stop(20 * time.Second) }()
	sctx, cancel := context.WithTimeout(ctx, c.Limit)
	err = app.Start(sctx, js, c.Pipeline, RunID, hello.Input) // the service answers it before any crash point
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w; the service's log ends:\n%s", err, svc.logEnd())
	}
	var restarted time.Time
	if fault != "" {
		fired, err := c.untilCrash(ctx, js, svc)
		if err != nil {
			return nil, fmt.Errorf("%w; see %s", err, svc.log)
		}
		if t.fired = fired; fired {
			restarted = time.Now()
			if svc, err = start(c.Bin, []string{"service"}, env, filepath.Join(dir, "service-2.log"), false, nil); err != nil {
				return nil, err
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, c.Limit)
	defer cancel()
	rec, err := app.Wait(wctx, js, c.Pipeline, RunID)
	if err != nil {
		return nil, fmt.Errorf("%w (last record: %s); the service's log ends:\n%s", err, status(rec), svc.logEnd())
	}
	t.rec = rec
	if t.effects, err = readEffects(ctx, hello.EffectsURL); err != nil {
		return nil, err
	}
	if t.keyed, err = keyedWrites(ctx, js, c.Pipeline); err != nil {
		return nil, err
	}
	if !restarted.IsZero() {
		t.resumed = startedSince(rec, restarted)
	}
	t.took = time.Since(began)
	return t, nil
}

func status(r *kc.Record) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%s, next: %s", r.Status, r.NextAction)
}

// sandbox starts `Bin chaos-sandbox dir/sandbox` and reads its Hello.
func (c Config) sandbox(ctx context.Context, dir string) (Hello, *proc, error) {
	sdir := filepath.Join(dir, "sandbox")
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return Hello{}, nil, err
	}
	lines := make(chan string, 1)
	p, err := start(c.Bin, []string{SandboxCommand, sdir}, append(os.Environ(), c.Env...), filepath.Join(dir, "sandbox.log"), true, func(s string) {
		select {
		case lines <- s:
		default:
		}
	})
	if err != nil {
		return Hello{}, nil, err
	}
	t := time.NewTimer(c.Limit)
	defer t.Stop()
	select {
	case line := <-lines:
		var h Hello
		if err := json.Unmarshal([]byte(line), &h); err != nil || h.EffectsURL == "" {
			p.stop(5 * time.Second)
			return Hello{}, nil, fmt.Errorf("%s %s printed %q, not its hello (a JSON object with effects_url): %v", filepath.Base(c.Bin), SandboxCommand, clip(line), err)
		}
		return h, p, nil
	case <-p.done:
		return Hello{}, nil, fmt.Errorf("%s %s ended (%v) before it said hello; its log ends:\n%s", filepath.Base(c.Bin), SandboxCommand, p.err, p.logEnd())
	case <-t.C:
	case <-ctx.Done():
	}
	p.stop(5 * time.Second)
	return Hello{}, nil, fmt.Errorf("%s %s said no hello within %s", filepath.Base(c.Bin), SandboxCommand, c.Limit)
}

// initAssets runs `Bin init` and waits for it to succeed.
func (c Config) initAssets(ctx context.Context, dir string, env []string) error {
	p, err := start(c.Bin, []string{"init"}, env, filepath.Join(dir, "init.log"), false, nil)
	if err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, c.Limit)
	defer cancel()
	if err := p.wait(ictx); err != nil {
		p.stop(time.Second)
		return err
	}
	if p.code() != 0 {
		return fmt.Errorf("%s init ended with %d; its log ends:\n%s", filepath.Base(c.Bin), p.code(), p.logEnd())
	}
	return nil
}

// untilCrash waits for the service process to exit at its fault (fired) or the run to end
// without it (not fired). Any other exit is an error.
func (c Config) untilCrash(ctx context.Context, js jetstream.JetStream, svc *proc) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Limit)
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		_, err := app.Wait(ctx, js, c.Pipeline, RunID)
		ended <- err
	}()
	select {
	case <-svc.done:
		if code := svc.code(); code != faults.ExitCode {
			return false, fmt.Errorf("the service ended with %d (%v), not the fault's exit %d", code, svc.err, faults.ExitCode)
		}
		return true, nil
	case err := <-ended:
		if err != nil {
			return false, err
		}
		return false, nil
	}
}

// startedSince are the steps whose latest attempt began at or after t: the ones the
// restart ran.
func startedSince(rec *kc.Record, t time.Time) []string {
	var out []string
	for _, s := range rec.Pipeline {
		st := rec.Steps[s]
		if st == nil || st.StartedAt == nil {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, *st.StartedAt); err == nil && !at.Before(t.Truncate(time.Millisecond)) {
			out = append(out, s)
		}
	}
	return out
}

// keyedWrites counts the run's keyed writes by step, from its saga.
func keyedWrites(ctx context.Context, js jetstream.JetStream, name string) (map[string]int, error) {
	sp, err := assets.SpaceOf(name)
	if err != nil {
		return nil, err
	}
	effs, _, err := saga.Effects(ctx, js, sp, nil, RunID)
	if err != nil {
		return nil, fmt.Errorf("reading the run's saga: %w", err)
	}
	out := map[string]int{}
	for _, e := range effs {
		out[e.Intent.Step]++
	}
	return out, nil
}

// Crashes are the report's crash points by step, as the fault map shows them.
func (r Report) Crashes() map[string][]faultmap.Crash {
	out := map[string][]faultmap.Crash{}
	for _, x := range r.Results {
		c := faultmap.Crash{Point: x.Point, Fired: x.Fired, Duplicates: x.Duplicates, Differences: len(x.Differences)}
		if len(x.Differences) > 0 {
			c.First = x.Differences[0]
		}
		out[x.Step] = append(out[x.Step], c)
	}
	return out
}
