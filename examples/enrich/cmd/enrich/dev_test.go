package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/pkg/app"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// `enrich dev` with no ENRICH_*_URL set is the whole job in one process: it serves NATS on a
// free port, starts the stub APIs, writes a records file and prints a start of it; that
// start, sent as printed, ends done; SIGTERM stops it cleanly (exit 0).
func TestDevRunsTheJobInOneProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{"ENRICH_AS_MAIN=1", "CAIRN_NATS_URL=nats://127.0.0.1:0", "ENRICH_DATA_DIR=" + filepath.Join(dir, "data"),
		"CAIRN_LEASE=3s", "CAIRN_HEARTBEAT=1s", "CAIRN_ACK_WAIT=3s"}
	for _, e := range os.Environ() { // the stubs stand in only when no URL is set
		if !strings.HasPrefix(e, "ENRICH_") && !strings.HasPrefix(e, "CAIRN_") {
			env = append(env, e)
		}
	}
	log, err := os.Create(filepath.Join(dir, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(os.Args[0], "dev")
	cmd.Env, cmd.Stderr = env, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no process outlives a failed test
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads after the ready
			}
		}
		close(lines)
		exited <- cmd.Wait() // after the pipe is read to its end
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // ended already, unless the test failed
	logEnd := func() string { b, _ := os.ReadFile(log.Name()); return tail(b, 4000) }

	printed := map[string]string{}
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("enrich dev ended before its ready (%v); its log:\n%s", <-exited, logEnd())
			}
			if k, v, ok := strings.Cut(l, ": "); ok {
				printed[k] = v
			}
			ready = l == "ready"
		case <-deadline.C:
			t.Fatalf("enrich dev not ready within a minute; its log:\n%s", logEnd())
		}
	}
	for _, k := range []string{"stub APIs", "records", "nats", "data", "start"} {
		if printed[k] == "" {
			t.Errorf("enrich dev printed no %q line before its ready: %q", k, printed)
		}
	}
	// The start as a developer would type it: nats -s URL pub SUBJECT 'JSON'.
	start := printed["start"]
	wantCmd := "nats -s " + printed["nats"] + " pub " + enrich.Space.RunStart() + " '"
	if !strings.HasPrefix(start, wantCmd) || !strings.HasSuffix(start, "'") {
		t.Fatalf("start line %q, want %q…'", start, wantCmd)
	}
	var input struct {
		RunID  string `json:"run_id"`
		Source string `json:"source"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(start, wantCmd), "'")), &input); err != nil || input.RunID == "" || input.Source != printed["records"] {
		t.Fatalf("start line %q: %+v, %v; want a run id and the records file %s", start, input, err, printed["records"])
	}
	if _, err := os.Stat(input.Source); err != nil {
		t.Fatalf("the printed records file: %v", err)
	}

	nc, err := nats.Connect(printed["nats"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := app.Start(ctx, js, enrich.Pipeline.Name, input.RunID, map[string]any{enrich.ParamSource: input.Source}); err != nil {
		t.Fatalf("%v; its log:\n%s", err, logEnd())
	}
	rec, err := app.Wait(ctx, js, enrich.Pipeline.Name, input.RunID)
	if err != nil || rec.Status != kc.Done {
		t.Fatalf("run %s: %+v, %v; want done; its log:\n%s", input.RunID, rec, err, logEnd())
	}
	if n := len(rec.Steps[enrich.Validate].Parked); n != 1 { // records.InvalidEvery: the 20th
		t.Errorf("validate parked %d of the %d records, want the one invalid", n, devRecords)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("enrich dev after SIGTERM: %v, want exit 0; its log:\n%s", err, logEnd())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("enrich dev still running 30s after SIGTERM; its log:\n%s", logEnd())
	}
}
