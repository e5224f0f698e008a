package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// runLine is one line of `cairn runs --json`.
type runLine struct {
	RunID      string `json:"run_id"`
	Status     string `json:"status"`
	Step       string `json:"step"`
	StepNumber int    `json:"step_number"`
	Steps      int    `json:"steps"`
	CreatedAt  string `json:"created_at"`
	Age        string `json:"age"`
	Restarts   int    `json:"restarts"`
	Generation int    `json:"generation"`
	NextAction string `json:"next_action"`
	Reason     string `json:"reason"`
}

// timelineOut is what `cairn timeline RUN --json` prints.
type timelineOut struct {
	RunID string `json:"run_id"`
	Count int    `json:"audit_events"`
	Steps []struct {
		Step        string         `json:"step"`
		StartedAt   *time.Time     `json:"started_at"`
		FinishedAt  *time.Time     `json:"finished_at"`
		Started     int            `json:"started"`
		Attempts    int            `json:"attempts"`
		Restarts    int            `json:"restarts"`
		Verified    int            `json:"verified"`
		Failed      int            `json:"failed"`
		Fenced      int            `json:"fenced"`
		Handovers   int            `json:"handovers"`
		Reassigned  int            `json:"reassigned"`
		Republished int            `json:"republished"`
		Items       map[string]int `json:"items"`
	} `json:"steps"`
	Events []struct {
		At     time.Time `json:"at"`
		Event  string    `json:"event"`
		Step   string    `json:"step"`
		Detail string    `json:"detail"`
	} `json:"events"`
}

// runsJSON runs `cairn runs --json` with extra flags and decodes its lines.
func (n *night) runsJSON(flags ...string) []runLine {
	n.t.Helper()
	out, code := n.cli(append([]string{"runs", "--json"}, flags...)...)
	if code != 0 {
		n.t.Fatalf("cairn runs --json %v exited %d", flags, code)
	}
	var rows []runLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r runLine
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			n.t.Fatalf("cairn runs --json line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows
}

// An operator looks at a night that crashed at entry 24 of post-ledger and finished after
// the restart: `cairn runs` lists it with its restart, `cairn timeline` shows post-ledger
// started twice with its lease reassigned in between, and a record that cannot be trusted
// is listed as such, never left out.
func TestOperatorRunsAndTimeline(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	fault := "post-ledger.before-write.24=exit@once"
	n.crash(fault)
	n.start("CAIRN_FAULTS=" + fault)
	rec := n.waitStatus(runLimit, kc.Done)

	if out, code := n.cli("runs"); code != 0 || !strings.Contains(out, runID) || !strings.Contains(out, "done") {
		t.Errorf("cairn runs (exit %d):\n%s", code, out)
	}
	rows := n.runsJSON("--status", "done")
	want := runLine{RunID: runID, Status: "done", Step: "-", StepNumber: 8, Steps: 8, CreatedAt: rec.CreatedAt,
		Restarts: 1, Generation: 0, NextAction: rec.NextAction}
	if len(rows) != 1 {
		t.Fatalf("cairn runs --json --status done: %+v, want one run", rows)
	}
	got := rows[0]
	if got.Age == "" || got.Age == "-" {
		t.Errorf("age %q, want how long ago the run was created", got.Age)
	}
	got.Age = ""
	if got != want {
		t.Errorf("cairn runs --json --status done: %+v, want %+v", got, want)
	}

	if rows := n.runsJSON("--step", "-", "--status", "cancelled,done"); len(rows) != 1 || rows[0].RunID != runID {
		t.Errorf("--step - --status cancelled,done: %+v, want %s", rows, runID)
	}
	// Filters that match nothing print nothing (or say so), and exit 0.
	if rows := n.runsJSON("--status", "running,handed_over"); len(rows) != 0 {
		t.Errorf("--status running,handed_over: %+v, want none", rows)
	}
	if rows := n.runsJSON("--step", "post-ledger"); len(rows) != 0 {
		t.Errorf("--step post-ledger: %+v, want none", rows)
	}
	if out, code := n.cli("runs", "--status", "cancelled"); code != 0 || strings.Contains(out, runID) || !strings.Contains(out, "no runs match") {
		t.Errorf("cairn runs --status cancelled (exit %d):\n%s", code, out)
	}
	if _, code := n.cli("runs", "--status", "finished"); code != 2 {
		t.Errorf("cairn runs --status finished exited %d, want 2 (no such status)", code)
	}

	tl := n.timeline(runID)
	if tl.RunID != runID || tl.Count == 0 {
		t.Fatalf("timeline of %s: run %q, %d audit events", runID, tl.RunID, tl.Count)
	}
	var names []string
	for _, s := range tl.Steps {
		names = append(names, s.Step)
	}
	if strings.Join(names, ",") != strings.Join(rec.Pipeline, ",") {
		t.Fatalf("timeline steps %v, want the pipeline %v", names, rec.Pipeline)
	}
	for _, s := range tl.Steps {
		if s.Verified != 1 || s.FinishedAt == nil || s.Failed != 0 || s.Fenced != 0 || s.Handovers != 0 {
			t.Errorf("step %s: %+v, want verified once, no failure, fence or handover", s.Step, s)
		}
		if s.Step == "match" {
			continue // lease-free: it audits its commit, not its start
		}
		if s.StartedAt == nil || s.FinishedAt == nil || s.FinishedAt.Before(*s.StartedAt) {
			t.Errorf("step %s: started %v, finished %v", s.Step, s.StartedAt, s.FinishedAt)
		}
		switch s.Step {
		case "post-ledger":
			if s.Started != 2 || s.Attempts != 2 || (s.Reassigned < 1 && s.Restarts < 1) {
				t.Errorf("post-ledger: started %d, attempts %d, reassigned %d, restarts %d; want started twice after one reassignment or restart",
					s.Started, s.Attempts, s.Reassigned, s.Restarts)
			}
		default:
			if s.Started != 1 || s.Restarts != 0 {
				t.Errorf("step %s: started %d, restarts %d; want once, no restart", s.Step, s.Started, s.Restarts)
			}
		}
	}
	if tl.Steps[0].Items["document.read"] != 312 || tl.Steps[1].Items["extractor.called"] != 312 {
		t.Errorf("items: fetch %v, extract %v; want 312 documents read and 312 extractor calls", tl.Steps[0].Items, tl.Steps[1].Items)
	}
	at := map[string]time.Time{}
	for _, e := range tl.Events {
		if _, seen := at[e.Event]; !seen {
			at[e.Event] = e.At
		}
	}
	started, ok1 := at["run.started"]
	done, ok2 := at["run.done"]
	if !ok1 || !ok2 || !done.After(started) {
		t.Errorf("run events %+v: want run.started, then run.done later", tl.Events)
	}
	if _, ok := at["reassigned"]; !ok && tl.Steps[4].Reassigned > 0 {
		t.Errorf("run events %+v: want the reassignment of post-ledger's lease listed", tl.Events)
	}
	if out, code := n.cli("timeline", runID); code != 0 || !strings.Contains(out, "post-ledger") || !strings.Contains(out, "run.done") {
		t.Errorf("cairn timeline (exit %d):\n%s", code, out)
	}
	if _, code := n.cli("timeline", "run-nobody-started"); code != 1 {
		t.Errorf("cairn timeline of an unknown run exited %d, want 1", code)
	}

	// Two records that cannot be trusted: one whose sum does not match, one of another epoch.
	ctx := context.Background()
	kv, err := n.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "run-corrupt", []byte(`{"schema":1,"run_id":"run-corrupt","created_at":"2000-01-01T00:00:00Z","status":"done","sum":"sha256:00"}`)); err != nil {
		t.Fatal(err)
	}
	foreign := kc.New("run-foreign", kc.StringParams(false, "warehouse", warehouse, "date", date), rec.Pipeline, "2000-01-01T00:00:01Z")
	foreign.Status, foreign.Epoch = kc.Done, "foreign1"
	b, err := kc.Encode(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "run-foreign", b); err != nil {
		t.Fatal(err)
	}
	rows = n.runsJSON()
	if len(rows) != 3 || rows[0].RunID != "run-corrupt" || rows[1].RunID != "run-foreign" || rows[2].RunID != runID {
		t.Fatalf("cairn runs --json: %+v, want run-corrupt, run-foreign (created first) and %s", rows, runID)
	}
	for i, want := range []string{"sum", "epoch"} {
		if rows[i].Status != "untrusted" || !strings.Contains(rows[i].Reason, want) {
			t.Errorf("%s: status %q, reason %q; want untrusted, naming the %s", rows[i].RunID, rows[i].Status, rows[i].Reason, want)
		}
	}
	if rows := n.runsJSON("--status", "untrusted"); len(rows) != 2 {
		t.Errorf("--status untrusted: %+v, want the two", rows)
	}
}

// timeline runs `cairn timeline RUN --json` and decodes it.
func (n *night) timeline(run string) timelineOut {
	n.t.Helper()
	out, code := n.cli("timeline", run, "--json")
	if code != 0 {
		n.t.Fatalf("cairn timeline %s --json exited %d", run, code)
	}
	var tl timelineOut
	if err := json.Unmarshal([]byte(out), &tl); err != nil {
		n.t.Fatalf("cairn timeline --json: %v\n%s", err, out)
	}
	return tl
}
