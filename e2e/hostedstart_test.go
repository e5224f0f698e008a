package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// The operator's CLI on a hosted pipeline's run: cairn start --pipeline starts it on its own
// input, the same input under another run id exits 1 naming the first run, cairn status
// shows the run's input, and cairn rejected lists the refusal.
func TestCLIStartHostedPipelineTwice(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := app.Config{JS: js, KeysDir: filepath.Join(dir, "keys"),
		Pipeline: pipeline.Definition{Name: "copy", Input: []string{"source"}, Steps: []pipeline.Step{
			{Name: "read", Kind: pipeline.SourceRead, Recovery: "cheap to repeat"},
		}},
		Steps: map[string]runner.Step{"read": rowsStep{}},
	}
	defer apptest.Host(ctx, t, cfg)()
	cli := hostedCLI(ctx, t, js.Conn().ConnectedUrl(), dir)

	if out, code := cli("start", "--pipeline", "copy", "--input", "source=a.csv", "--run-id", "r-1", "--wait"); code != 0 || !strings.Contains(out, "started r-1") {
		t.Fatalf("cairn start --pipeline copy r-1: exit %d\n%s", code, out)
	}
	if out, code := cli("start", "--pipeline", "copy", "--input", "source=a.csv", "--run-id", "r-2"); code != 1 || !strings.Contains(out, "start of r-2 refused: run r-1 has this input already") {
		t.Errorf("the same input as r-2: exit %d, want 1 naming r-1:\n%s", code, out)
	}
	if out, code := cli("status", "--pipeline", "copy", "r-1"); code != 0 || !strings.Contains(out, "params     source a.csv, shadow false") {
		t.Errorf("cairn status --pipeline copy r-1: exit %d, want the run's input:\n%s", code, out)
	}
	if out, code := cli("rejected", "--pipeline", "copy"); code != 0 || !strings.Contains(out, "r-2") || !strings.Contains(out, "cairn.copy.runs.start") {
		t.Errorf("cairn rejected --pipeline copy: exit %d, want r-2's refused start:\n%s", code, out)
	}
}

// hostedCLI runs cairn's commands against the NATS at url with data dir, and returns their
// output and exit code.
func hostedCLI(ctx context.Context, t *testing.T, url, dir string) func(args ...string) (string, int) {
	return func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, cairnBin, args...)
		cmd.Env = append(os.Environ(), "CAIRN_NATS_URL="+url, "CAIRN_DATA_DIR="+dir)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("cairn %v: %v", args, err)
		}
		return string(out), 0
	}
}

// rowsStep is a step that reads nothing and says so.
type rowsStep struct{}

func (rowsStep) Run(context.Context, *runner.Attempt) (*runner.Result, error) {
	return &runner.Result{Output: json.RawMessage(`"rows"`), Items: 1}, nil
}
