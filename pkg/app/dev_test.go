package app_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// devloop reads a name, then says hello to it.
var devloop = pipeline.Definition{Name: "devloop", Input: []string{"name"}, Steps: []pipeline.Step{
	{Name: "read", Kind: pipeline.SourceRead, Recovery: "read again"},
	{Name: "hello", Kind: pipeline.Compute, Leased: true, Recovery: "recomputed"},
}}

// devSteps are devloop's steps: read counts its attempts by run; hello, while hold is set,
// tells held of the run it holds and waits for its context to end.
type devSteps struct {
	reads map[string]*atomic.Int32
	hold  atomic.Bool
	held  chan string
}

func (s *devSteps) steps() map[string]runner.Step {
	return map[string]runner.Step{
		"read": stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
			s.reads[a.RunID].Add(1)
			return output(map[string]string{"name": a.Params.String("name")}), nil
		}),
		"hello": stepFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
			if s.hold.Load() {
				s.held <- a.RunID
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return output("hello, " + a.Params.String("name")), nil
		}),
	}
}

// dev is one Dev of devloop in the test's process.
type dev struct {
	url  string
	js   jetstream.JetStream
	stop func() error // ends Dev and returns its error
}

// startDev runs Dev on dir with example until stop, and waits for its "ready", reading the
// URL it names and checking the start it prints has body wantStart.
func startDev(t *testing.T, dir string, s *devSteps, example map[string]any, wantStart string) *dev {
	t.Helper()
	r, w := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		err := app.Dev(ctx, app.DevConfig{Pipeline: devloop, Dir: dir, AckWait: 3 * time.Second, Example: example, Out: w},
			func(ctx context.Context, js jetstream.JetStream) (app.Config, error) {
				return app.Config{Steps: s.steps(), Lease: 3 * time.Second, Heartbeat: time.Second, StopGrace: 200 * time.Millisecond}, nil
			})
		_ = w.CloseWithError(errors.Join(err, io.EOF))
		ended <- err
	}()
	stopped := false
	d := &dev{stop: func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-ended:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("dev did not stop within 30s of its context's end")
		}
	}}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("dev: %v", err)
		}
	})
	lines := make(chan string, 16) // Dev writes four
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads after the ready
			}
		}
	}()
	var start string
	deadline := time.After(30 * time.Second)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("dev ended before its ready: %v", <-ended)
			}
			if u, ok := strings.CutPrefix(l, "nats: "); ok {
				d.url = u
			}
			if c, ok := strings.CutPrefix(l, "start: "); ok {
				start = c
			}
			ready = l == "ready"
		case <-deadline:
			t.Fatal("dev not ready within 30s")
		}
	}
	want := "nats -s " + d.url + " pub cairn.devloop.runs.start '" + wantStart + "'"
	if d.url == "" || start != want {
		t.Fatalf("dev's lines: nats %q, start %q; want a URL and start %q", d.url, start, want)
	}
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if d.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return d
}

// Dev hosts a pipeline whole: a run started on its server ends done, and a second Dev on its
// directory is refused. Stopped while a run is in its second step and started again on the
// same directory, it has every record, and the interrupted run resumes at that step (its
// first is not run again) and ends done.
func TestDevHostsAPipelineAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	s := &devSteps{reads: map[string]*atomic.Int32{"r-1": {}, "r-2": {}}, held: make(chan string, 1)}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	d := startDev(t, dir, s, map[string]any{"name": "ada"}, `{"run_id":"r-1","name":"ada"}`)
	err := app.Dev(ctx, app.DevConfig{Pipeline: devloop, Dir: dir, Out: io.Discard}, func(context.Context, jetstream.JetStream) (app.Config, error) {
		t.Error("a second dev on the directory got as far as its build")
		return app.Config{}, errors.New("not this far")
	})
	if err == nil || !strings.Contains(err.Error(), "another dev's") {
		t.Errorf("a second dev on the directory: %v, want it refused as another dev's", err)
	}
	if err := app.Start(ctx, d.js, devloop.Name, "r-1", map[string]any{"name": "ada"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := app.Wait(ctx, d.js, devloop.Name, "r-1"); err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1: %+v, %v; want done", rec, err)
	}
	s.hold.Store(true)
	if err := app.Start(ctx, d.js, devloop.Name, "r-2", map[string]any{"name": "grace"}); err != nil {
		t.Fatal(err)
	}
	select {
	case run := <-s.held:
		if run != "r-2" {
			t.Fatalf("hello held %s, want r-2", run)
		}
	case <-ctx.Done():
		t.Fatal("r-2 never reached hello")
	}
	if err := d.stop(); err != nil {
		t.Fatalf("dev stopped with %v, want nil", err)
	}

	s.hold.Store(false)
	d = startDev(t, dir, s, nil, `{"run_id":"r-1","name":"<name>"}`) // a placeholder without an example
	if rec, err := app.Wait(ctx, d.js, devloop.Name, "r-1"); err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1 after the restart: %+v, %v; want its record, done", rec, err)
	}
	rec, err := app.Wait(ctx, d.js, devloop.Name, "r-2")
	if err != nil || rec.Status != kc.Done {
		t.Fatalf("r-2 after the restart: %+v, %v; want it resumed and done", rec, err)
	}
	if got := string(rec.Steps["hello"].Output.Inline); got != `"hello, grace"` {
		t.Errorf("r-2's hello: %s, want \"hello, grace\"", got)
	}
	if n := s.reads["r-2"].Load(); n != 1 {
		t.Errorf("r-2's read ran %d times, want once: the restart resumes at hello", n)
	}
}

// Dev refuses, before it starts anything, a server others could reach and a Config that
// is not the pipeline it made the assets for.
func TestDevRefusals(t *testing.T) {
	build := func(c app.Config) func(context.Context, jetstream.JetStream) (app.Config, error) {
		return func(context.Context, jetstream.JetStream) (app.Config, error) { return c, nil }
	}
	s := &devSteps{reads: map[string]*atomic.Int32{}}
	for _, tc := range []struct {
		name  string
		d     app.DevConfig
		c     app.Config
		wants string
	}{
		{"open host", app.DevConfig{Pipeline: devloop, Host: "0.0.0.0"}, app.Config{}, `host "0.0.0.0" is not a loopback address`},
		{"no dir", app.DevConfig{Pipeline: devloop}, app.Config{}, "no Dir"},
		{"another pipeline", app.DevConfig{Pipeline: devloop}, app.Config{Pipeline: greeting(nil, "other", "").Job.Pipeline(), Steps: s.steps()}, `its pipeline is "other", not DevConfig's "devloop"`},
		{"another ack wait", app.DevConfig{Pipeline: devloop}, app.Config{Steps: s.steps(), AckWait: time.Second}, "its AckWait 1s is not DevConfig's 30s"},
		{"replicas", app.DevConfig{Pipeline: devloop}, app.Config{Steps: s.steps(), Replicas: 3}, "the dev server is one node"},
		{"no steps", app.DevConfig{Pipeline: devloop}, app.Config{}, `step "read" has no implementation`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "no dir" {
				tc.d.Dir = t.TempDir()
			}
			tc.d.Out = io.Discard
			err := app.Dev(t.Context(), tc.d, build(tc.c))
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("Dev: %v, want an error saying %q", err, tc.wants)
			}
		})
	}
}
