package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// What happens if the night runs twice against the same input? Nothing: a start of the
// same warehouse and date under another run id is refused, by cairn start (exit 1, naming
// the run that has the night) and by a plain publish (on cairn.rejected), and the ledger and
// the stock store keep exactly the night's rows. The same start of the run itself is still
// one run.
func TestTheSameNightTwiceDoesNothing(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start()
	n.startRun()
	n.waitStatus(runLimit, kc.Done)

	out, code := n.cliCombined("start", "--warehouse", warehouse, "--date", date, "--run-id", "run-x")
	if code != 1 || !strings.Contains(out, "run "+runID+" has this input already") {
		t.Fatalf("cairn start of the same night as run-x: exit %d, want 1 naming %s:\n%s", code, runID, out)
	}
	n.publish(events.RunStartSubject, fmt.Sprintf(`{"run_id":"run-y","warehouse":%q,"date":%q}`, warehouse, date))
	if r := n.waitRejection("run-y"); !strings.Contains(r.Reason, "run "+runID+" ") {
		t.Errorf("the start of run-y was refused with %q, which does not name %s", r.Reason, runID)
	}
	kv, err := n.js.KeyValue(context.Background(), assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"run-x", "run-y"} {
		if _, err := kv.Get(context.Background(), run); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("record of %s: %v, want none", run, err)
		}
	}
	if out, code := n.cli("start", "--warehouse", warehouse, "--date", date); code != 0 || !strings.Contains(out, "run "+runID+" exists already (done)") {
		t.Errorf("cairn start of the run itself again: exit %d, want 0 and one run:\n%s", code, out)
	}

	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != len(n.truth.Adjustments) {
		t.Errorf("ledger rows %d, want %d", rows, len(n.truth.Adjustments))
	}
	if rows := n.scalar("erp.db", `SELECT count(*) FROM stock_adjustments`); rows != len(n.truth.Adjustments) {
		t.Errorf("stock adjustments %d, want %d", rows, len(n.truth.Adjustments))
	}
	n.assertTruth()
	if c := n.audit(); c["run.started"] != 1 {
		t.Errorf("audit %v: want one run.started", c)
	}
}

// cliCombined runs the cairn CLI and returns what it printed on both outputs, and its exit code.
func (n *night) cliCombined(args ...string) (string, int) {
	n.t.Helper()
	cmd := exec.Command(cairnBin, args...)
	cmd.Env = append(append(os.Environ(), "CAIRN_NATS_URL="+n.url, "CAIRN_DATA_DIR="+n.dir), n.cliEnv...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		n.t.Fatalf("cairn %v: %v", args, err)
	}
	return string(out), 0
}

// waitRejection waits for the refusal of a start of run on cairn.rejected.
func (n *night) waitRejection(run string) events.Rejected {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cons, err := n.js.OrderedConsumer(ctx, assets.StreamRejected, jetstream.OrderedConsumerConfig{})
	if err != nil {
		n.t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Minute))
		if err != nil {
			n.t.Fatalf("no refusal of %s on %s: %v", run, events.RejectedSubject, err)
		}
		e, err := events.Decode(natsMsg(m))
		if err != nil {
			n.t.Fatal(err)
		}
		var r events.Rejected
		if err := e.Unmarshal(&r); err != nil {
			n.t.Fatal(err)
		}
		if e.Subject == run {
			return r
		}
	}
}
