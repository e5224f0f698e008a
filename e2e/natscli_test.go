//go:build linux

// The NATS CLI tests need a pseudo-terminal for `nats stream view`, which v0.5.0 refuses to
// run without one ("interactive stream paging requires a valid terminal"); the terminal is
// opened with Linux ioctls, hence the build constraint.

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// natsCLI finds the nats binary: on PATH, else in $(go env GOPATH)/bin where
// `go install github.com/nats-io/natscli/nats@v0.5.0` puts it. Without it the test is
// skipped, except in CI (CI set), where its absence fails the test.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(gopath))) {
			p := filepath.Join(dir, "bin", "nats")
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				return p
			}
		}
	}
	const how = "the NATS CLI (nats) is on neither PATH nor $(go env GOPATH)/bin; install it with `go install github.com/nats-io/natscli/nats@v0.5.0` (make nats-cli)"
	if os.Getenv("CI") != "" {
		t.Fatal(how)
	}
	t.Skip("skipped: " + how)
	return ""
}

// natsRun runs `nats --server URL args...` with no user context (a fresh config home) and
// returns its standard output; a failure ends the test.
func (n *night) natsRun(bin string, args ...string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", n.url}, args...)...)
	cmd.Env = append(append(os.Environ(), "XDG_CONFIG_HOME="+n.t.TempDir()), n.cliEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		n.t.Fatalf("nats %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// natsInTerminal runs `nats --server URL args...` on a pseudo-terminal and returns what it
// wrote there. It fails the test if the command does not end by itself within limit (a
// pager waiting for an answer, for instance).
func (n *night) natsInTerminal(bin string, limit time.Duration, args ...string) string {
	n.t.Helper()
	ptmx, tty, err := openPTY()
	if err != nil {
		n.t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	cmd := exec.Command(bin, append([]string{"--server", n.url}, args...)...)
	cmd.Env = append(append(os.Environ(), "XDG_CONFIG_HOME="+n.t.TempDir(), "TERM=dumb"), n.cliEnv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	tty.Close() // the child holds the terminal now; the reader sees EIO once it exits
	if err != nil {
		n.t.Fatalf("nats %s: %v", strings.Join(args, " "), err)
	}
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(ptmx) // ends with EIO when the child's side closes
		read <- b
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	select {
	case err = <-exited:
	case <-deadline.C:
		_ = cmd.Process.Kill()
		<-exited
		n.t.Fatalf("nats %s did not end within %s; it wrote:\n%s", strings.Join(args, " "), limit, <-read)
	}
	out := <-read
	if err != nil {
		n.t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.ReplaceAll(string(out), "\r\n", "\n")
}

// openPTY opens a pseudo-terminal pair: the controlling side and the terminal.
func openPTY() (ptmx, tty *os.File, err error) {
	ptmx, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		ptmx.Close()
		return nil, nil, fmt.Errorf("unlocking the pseudo-terminal: %w", e)
	}
	var num uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&num))); e != 0 {
		ptmx.Close()
		return nil, nil, fmt.Errorf("numbering the pseudo-terminal: %w", e)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", num), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptmx.Close()
		return nil, nil, err
	}
	return ptmx, tty, nil
}

// rejections follows cairn.rejected from its first message; next waits for the next one
// (deadline: a minute) and returns its stream sequence.
type rejections struct {
	t    *testing.T
	cons jetstream.Consumer
}

func (n *night) rejections() *rejections {
	n.t.Helper()
	cons, err := n.js.OrderedConsumer(context.Background(), assets.StreamRejected, jetstream.OrderedConsumerConfig{})
	if err != nil {
		n.t.Fatal(err)
	}
	return &rejections{t: n.t, cons: cons}
}

func (r *rejections) next() uint64 {
	r.t.Helper()
	m, err := r.cons.Next(jetstream.FetchMaxWait(time.Minute))
	if err != nil {
		r.t.Fatalf("waiting for a message on %s: %v", events.RejectedSubject, err)
	}
	meta, err := m.Metadata()
	if err != nil {
		r.t.Fatal(err)
	}
	return meta.Sequence.Stream
}

// rejectedByCLI reads message seq of CAIRN_REJECTED with `nats stream get --json`, as an
// operator would, and decodes the refusal it records.
func (n *night) rejectedByCLI(bin string, seq uint64) events.Rejected {
	n.t.Helper()
	out := n.natsRun(bin, "stream", "get", assets.StreamRejected, fmt.Sprint(seq), "--json")
	var stored struct {
		Subject string `json:"subject"`
		Data    []byte `json:"data"` // base64 in the CLI's JSON
	}
	if err := json.Unmarshal([]byte(out), &stored); err != nil {
		n.t.Fatalf("nats stream get %s %d --json: %v\n%s", assets.StreamRejected, seq, err, out)
	}
	var r events.Rejected
	if stored.Subject != events.RejectedSubject || json.Unmarshal(stored.Data, &r) != nil {
		n.t.Fatalf("nats stream get %s %d: subject %q, data %q; want a refusal on %s", assets.StreamRejected, seq, stored.Subject, stored.Data, events.RejectedSubject)
	}
	return r
}

// seqRequests are the request ids the supervisor gave commands published without one: the
// command's stream sequence.
func seqRequests(rec *kc.Record) []string {
	return slices.DeleteFunc(slices.Clone(rec.Requests), func(id string) bool { return !strings.HasPrefix(id, "seq-") })
}

// An operator with nothing but the NATS CLI starts a run, reads its checkpoint and its
// timeline, and sees refused input with its reason.
func TestNatsCLIStartAndInspect(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	bin := natsCLI(t)
	n := newNight(t, 0)
	n.start()
	rejected := n.rejections()

	n.natsRun(bin, "pub", events.RunStartSubject, fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q}`, runID, warehouse, date))
	rec := n.waitStatus(runLimit, kc.Done)
	if len(seqRequests(rec)) != 1 {
		t.Errorf("requests %v, want the start's stream sequence (a plain publish has no request_id)", rec.Requests)
	}

	// The checkpoint, as `nats kv get --raw` prints it: the record's own bytes, every field
	// DESIGN.md lists present, no other.
	raw := n.natsRun(bin, "kv", "get", assets.BucketRuns, runID, "--raw")
	if _, err := kc.Decode([]byte(raw)); err != nil {
		t.Fatalf("nats kv get --raw does not print the record: %v\n%s", err, raw)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		t.Fatal(err)
	}
	wantFields := []string{"schema", "run_id", "params", "created_at", "epoch", "status", "pipeline", "steps",
		"source_fingerprint", "snapshot", "lease", "next_action", "restarts", "generation", "requests",
		"approval", "handover", "undo", "commands", "updated_at", "progressed_at", "progress", "after", "prev", "sig", "sum"}
	if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, slices.Sorted(slices.Values(wantFields))) {
		t.Errorf("checkpoint fields %v, want %v", got, slices.Sorted(slices.Values(wantFields)))
	}
	var record struct {
		Schema   int                                   `json:"schema"`
		RunID    string                                `json:"run_id"`
		Params   map[string]any                        `json:"params"`
		Status   string                                `json:"status"`
		Pipeline []string                              `json:"pipeline"`
		Steps    map[string]map[string]json.RawMessage `json:"steps"`
		Lease    json.RawMessage                       `json:"lease"`
		Sum      string                                `json:"sum"`
	}
	if err := json.Unmarshal([]byte(raw), &record); err != nil {
		t.Fatal(err)
	}
	wantParams := map[string]any{"warehouse": warehouse, "date": date, "shadow": false}
	if record.Schema != kc.Schema || record.RunID != runID || !maps.Equal(record.Params, wantParams) || record.Status != "done" ||
		string(record.Lease) != "null" || !strings.HasPrefix(record.Sum, "sha256:") {
		t.Errorf("checkpoint: schema %d, run %q, params %v, status %q, lease %s, sum %q", record.Schema, record.RunID, record.Params, record.Status, record.Lease, record.Sum)
	}
	wantPipeline := []string{"fetch", "extract", "match", "compare", "post-ledger", "update-stock", "debit-notes", "report"}
	if !slices.Equal(record.Pipeline, wantPipeline) || len(record.Steps) != len(wantPipeline) {
		t.Errorf("pipeline %v with %d steps, want %v", record.Pipeline, len(record.Steps), wantPipeline)
	}
	stepFields := slices.Sorted(slices.Values([]string{"status", "attempts", "started_at", "finished_at", "output",
		"input_fingerprint", "versions", "token", "effects", "parked", "parked_count", "parked_artifact", "last_error"}))
	for _, name := range wantPipeline {
		s := record.Steps[name]
		if got := slices.Sorted(maps.Keys(s)); !slices.Equal(got, stepFields) || string(s["status"]) != `"verified"` {
			t.Errorf("step %s: fields %v, status %s; want %v, verified", name, got, s["status"], stepFields)
		}
	}

	// The timeline, as `nats stream view` pages it: the run's last 16 events fit one page of
	// 25 (the most it allows; its default is 10), so the pager reaches the end of the data and
	// stops by itself instead of asking whether to show the next page.
	var info struct {
		State struct {
			LastSeq uint64 `json:"last_seq"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(n.natsRun(bin, "stream", "info", assets.StreamAudit, "--json")), &info); err != nil {
		t.Fatal(err)
	}
	from := max(int64(info.State.LastSeq)-15, 1)
	view := n.natsInTerminal(bin, 30*time.Second, "stream", "view", assets.StreamAudit, "25", "--subject", events.AuditSubject(runID), "--id", fmt.Sprint(from))
	if !strings.Contains(view, "Subject: "+events.AuditSubject(runID)) || !strings.Contains(view, `"event":"step.verified"`) ||
		!strings.Contains(view, "ce-type: "+events.TypeAudit) {
		t.Errorf("nats stream view %s: want %s events with step.verified among them; it shows:\n%s", assets.StreamAudit, runID, view)
	}

	// Malformed input ends on cairn.rejected with its reason.
	n.natsRun(bin, "pub", events.RunStartSubject, "not json")
	r := n.rejectedByCLI(bin, rejected.next())
	if r.Subject != events.RunStartSubject || r.Data != "not json" || !strings.Contains(r.Reason, "not JSON") {
		t.Errorf("refused start: %+v, want the body and a reason saying it is not JSON", r)
	}

	// An approve of a run that waits for nothing changes nothing and is audited (the approval
	// of a waiting run, by nats pub, is in TestApprovalByNatsPub).
	n.natsRun(bin, "pub", events.RunSubject(runID, events.VerbApprove), "")
	if !poll(30*time.Second, func() bool { return n.audit()["approve.ignored"] == 1 }) {
		t.Errorf("an approve of a done run: audit %v, want one approve.ignored", n.audit())
	}

	kv, err := n.js.KeyValue(context.Background(), assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.Keys(context.Background()); err != nil || !slices.Equal(keys, []string{runID}) {
		t.Errorf("runs %v (%v), want only %s", keys, err, runID)
	}
}

// A run handed over by an error of unknown class is resumed with a plain `nats pub`.
func TestNatsCLIResume(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	bin := natsCLI(t)
	n := newNight(t, 0)
	fault := "update-stock.before-write.5=error:unknown@once"
	n.start("CAIRN_FAULTS=" + fault)
	n.natsRun(bin, "pub", events.RunStartSubject, fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q}`, runID, warehouse, date))
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || rec.Step("update-stock").Status != kc.Failed {
		t.Fatalf("status %s, update-stock %s; want handed over at update-stock", rec.Status, rec.Step("update-stock").Status)
	}

	n.natsRun(bin, "pub", events.RunSubject(runID, events.VerbResume), "")
	rec = n.waitStatus(runLimit, kc.Done)
	n.assertTruth()
	if len(seqRequests(rec)) != 2 {
		t.Errorf("requests %v, want the start's and the resume's stream sequences", rec.Requests)
	}
	if c := n.audit(); c["handover"] != 1 || c["run.resumed"] != 1 {
		t.Errorf("audit %v: want one handover and one run.resumed", c)
	}
}

// A run stalled in post-ledger is cancelled with a plain `nats pub`: the cancel takes effect
// at once in the record, and the stalled attempt writes nothing more.
func TestNatsCLICancel(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	bin := natsCLI(t)
	n := newNight(t, 0)
	// The stall holds until the process stops; a short grace makes the test's stop quick.
	n.start("CAIRN_FAULTS=post-ledger.before-write.3=stall", "CAIRN_STOP_GRACE=1s")
	n.natsRun(bin, "pub", events.RunStartSubject, fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q}`, runID, warehouse, date))
	rec := n.waitRecord(runLimit, "post-ledger holding its lease", func(r *kc.Record) bool {
		return r.Lease != nil && r.Lease.Step == "post-ledger"
	})
	if rec.Status != kc.Running {
		t.Fatalf("status %s, want running", rec.Status)
	}

	n.natsRun(bin, "pub", events.RunSubject(runID, events.VerbCancel), "")
	rec = n.waitStatus(runLimit, kc.Cancelled, kc.Done, kc.HandedOver)
	if rec.Status != kc.Cancelled || len(seqRequests(rec)) != 2 || !strings.Contains(rec.NextAction, "cairn resume "+runID) {
		t.Fatalf("status %s, requests %v, next action %q; want cancelled by the published command, saying how to go on", rec.Status, rec.Requests, rec.NextAction)
	}
	if st := rec.Step("post-ledger"); st.Status == kc.Verified {
		t.Errorf("post-ledger is %s: the stalled attempt cannot have finished", st.Status)
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows > 2 {
		t.Errorf("ledger rows %d, want at most the 2 written before the stall", rows)
	}
	if c := n.audit(); c["run.cancelled"] != 1 {
		t.Errorf("audit %v: want one run.cancelled", c)
	}
}

// A run waiting for approval is approved by a plain nats pub of an approve command signed
// by a registered approver.
func TestNatsCLIApprove(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	bin := natsCLI(t)
	n := newNight(t, 0)
	n.start(approvalEnv)
	n.startRun()
	waiting := n.waitingForApproval()
	n.natsRun(bin, "pub", events.RunSubject(runID, events.VerbApprove), signedApprove(t, waiting, "asha", n.approver("asha")))
	rec := n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done || rec.Approval == nil || rec.Approval.By == nil {
		t.Fatalf("status %s, approval %+v", rec.Status, rec.Approval)
	}
	n.assertTruth()
}
