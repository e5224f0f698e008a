package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/chaos"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// The test binary is the pipeline's binary too: started with TALLY_AS_MAIN=1 it runs the
// tally pipeline's commands (init, service, chaos-sandbox), as a user's binary would.
func TestMain(m *testing.M) {
	if os.Getenv("TALLY_AS_MAIN") == "1" {
		if err := tallyMain(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tally: count reads how many rows the run posts; post writes them to the ledger, a keyed
// write each (runner.Attempt.Keyed), to the sandbox's HTTP ledger.
var tally = pipeline.Definition{Name: "tally", Input: []string{"rows"}, Steps: []pipeline.Step{
	{Name: "count", Kind: pipeline.SourceRead, Recovery: "read again"},
	{Name: "post", Kind: pipeline.BusinessWrite, Leased: true, Effects: "ledger rows", Key: "<run>:row:<n>, the ledger's Idempotency-Key", Recovery: "post again: the ledger keeps each key once"},
}}

type count struct{}

func (count) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	return &runner.Result{Output: a.Params.Input["rows"], Items: 1}, nil
}

type post struct{ url string }

// Verify checks that every row of the run was posted (the ledger answered 200 to each key,
// or the step would have failed) by counting the items against the count step's output.
func (p post) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	b, err := a.Input(ctx, "count")
	if err != nil {
		return err
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	if r.Items != n {
		return fmt.Errorf("posted %d rows, want %d", r.Items, n)
	}
	return nil
}

func (p post) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	b, err := a.Input(ctx, "count")
	if err != nil {
		return nil, err
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	effs := make([]runner.Effect, n)
	for i := range effs {
		effs[i] = runner.Effect{Key: fmt.Sprintf("%s:row:%d", a.RunID, i+1), Payload: map[string]int{"paise": 100 * (i + 1)}}
	}
	err = a.Keyed(ctx, effs, func(ctx context.Context, i int) (*saga.Receipt, error) {
		body, _ := json.Marshal(effs[i].Payload)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/rows", strings.NewReader(string(body)))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Idempotency-Key", effs[i].Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, runner.Temporary(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("the ledger answered %s", resp.Status)
		}
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return &runner.Result{Output: json.RawMessage(`"posted"`), Items: n}, nil
}

func tallyMain(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 2 && args[0] == chaos.SandboxCommand {
		return sandbox(ctx, args[1])
	}
	nc, err := nats.Connect(os.Getenv("CAIRN_NATS_URL"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	dir := os.Getenv("TALLY_DIR")
	fs, err := faults.Parse(os.Getenv("CAIRN_FAULTS"), filepath.Join(dir, "faults"))
	if err != nil {
		return err
	}
	cfg := app.Config{JS: js, Pipeline: tally, KeysDir: filepath.Join(dir, "keys"), Faults: fs,
		Steps: map[string]runner.Step{"count": count{}, "post": post{url: os.Getenv("TALLY_LEDGER")}},
		Lease: 3 * time.Second, Heartbeat: time.Second, AckWait: 3 * time.Second}
	switch {
	case len(args) == 1 && args[0] == "init":
		return app.Init(ctx, cfg)
	case len(args) == 1 && args[0] == "service":
		if err := app.Run(ctx, cfg); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("usage: init | service | chaos-sandbox DIR, not %q", args)
}

// sandbox is the tally's ledger: it keeps each Idempotency-Key once, unless TALLY_LEAKY=1
// (a ledger that ignores the key, as a system without one would).
func sandbox(ctx context.Context, dir string) error {
	leaky := os.Getenv("TALLY_LEAKY") == "1"
	var mu sync.Mutex
	var rows []string
	seen := map[string]bool{}
	calls := 0
	ledger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		calls++
		if !seen[key] || leaky {
			rows = append(rows, key+" "+string(b))
			seen[key] = true
		}
	}))
	defer ledger.Close()
	return chaos.ServeSandbox(ctx, os.Stdin, os.Stdout, chaos.Sandbox{
		Env:   []string{"TALLY_DIR=" + filepath.Join(dir, "data"), "TALLY_LEDGER=" + ledger.URL},
		Input: map[string]any{"rows": 6},
		Effects: func(context.Context) (chaos.Effects, error) {
			mu.Lock()
			defer mu.Unlock()
			return chaos.Effects{Effects: slices.Clone(rows), Calls: map[string]int{"ledger": calls}}, nil
		},
	})
}

func config(t *testing.T, env ...string) chaos.Config {
	return chaos.Config{Pipeline: "tally", Bin: os.Args[0], Env: append([]string{"TALLY_AS_MAIN=1"}, env...), Dir: t.TempDir(), Limit: time.Minute}
}

// Every default point of a pipeline whose ledger keeps its keys: each fires, each run ends
// done with the reference's six rows once each; a lost reply costs calls, not rows.
func TestEveryPointEqualsTheReference(t *testing.T) {
	t.Parallel()
	c := config(t)
	rep, err := chaos.Run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"supervisor.after-record=exit@once",
		"count.before-commit=exit@once", "count.after-commit=exit@once", "count.before-next-publish=exit@once",
		"post.before-commit=exit@once", "post.after-commit=exit@once",
		"post.before-write.1=exit@once", "post.lost-reply.3=exit@once", "post.after-write.6=exit@once",
	}
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.Point)
		if r.Bad() {
			t.Errorf("%s: fired %t, differences %q", r.Point, r.Fired, r.Differences)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("points %q, want %q", got, want)
	}
	if n := len(rep.Reference.Effects); n != 6 {
		t.Errorf("the reference holds %d rows, want 6", n)
	}
	for _, r := range rep.Results {
		if r.Point == "post.lost-reply.3=exit@once" && r.ExtraCalls["ledger"] < 1 {
			t.Errorf("a lost reply of row 3 cost the ledger %d calls again, want its resend counted", r.ExtraCalls["ledger"])
		}
	}
	saved, err := chaos.ReadReport(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Pipeline != "tally" || len(saved.Results) != len(want) || saved.Bad() != 0 {
		t.Errorf("the saved report is %s with %d results (%d bad), want tally's %d, none bad", saved.Pipeline, len(saved.Results), saved.Bad(), len(want))
	}
}

// A ledger that ignores the key: a crash after a write and before its outcome is recorded
// posts that row again, and chaos names the duplicate.
func TestDuplicateFoundWhereTheKeyIsNotKept(t *testing.T) {
	t.Parallel()
	c := config(t, "TALLY_LEAKY=1")
	c.Points = []string{"post.lost-reply.3=exit@once", "post.after-commit=exit@once"}
	rep, err := chaos.Run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	lost, after := rep.Results[0], rep.Results[1]
	if !lost.Fired || lost.Duplicates != 3 || len(lost.Differences) != 3 {
		t.Errorf("lost reply of row 3: fired %t, %d duplicates, differences %q; want rows 1 to 3 posted twice", lost.Fired, lost.Duplicates, lost.Differences)
	}
	for _, d := range lost.Differences {
		if !strings.HasPrefix(d, "effect extra (1): chaos-run:row:") {
			t.Errorf("difference %q, want an extra row", d)
		}
	}
	if after.Bad() || after.Duplicates != 0 {
		t.Errorf("after the commit nothing is posted again, yet: fired %t, differences %q", after.Fired, after.Differences)
	}
	if rep.Bad() != 1 {
		t.Errorf("%d bad trials, want 1", rep.Bad())
	}
}

// A point the run never reaches is reported as not fired; a point that is not a crash is
// refused before any run.
func TestPointsThatCannotCrash(t *testing.T) {
	t.Parallel()
	c := config(t)
	c.Points = []string{"post.after-write.99=exit@once"}
	rep, err := chaos.Run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Results[0]; r.Fired || !r.Bad() || r.Status != "done" {
		t.Errorf("a write that never happens: fired %t, bad %t, status %s; want not fired, bad, the run done", r.Fired, r.Bad(), r.Status)
	}
	c.Points = []string{"post.after-write.2=error:temporary"}
	if _, err := chaos.Run(t.Context(), c); err == nil || !strings.Contains(err.Error(), "crashes the process") {
		t.Errorf("a point that does not exit: %v, want it refused", err)
	}
}
