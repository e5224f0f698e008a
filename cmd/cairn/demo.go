package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"

	_ "modernc.org/sqlite"
)

const demoFault = "post-ledger.before-write.24=exit@once"

func cmdDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(".cairn", "demo"), "data folder, emptied first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.RemoveAll(*dir); err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	env := append(os.Environ(), "CAIRN_DATA_DIR="+*dir, "CAIRN_NATS_URL="+url, "CAIRN_FAULTS="+demoFault)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	const wh, date, run = "ldh", "2026-10-13", "run-2026-10-13-ldh"
	fmt.Println("1. generating the reference night: 312 invoices, 40 mismatches, seed 1")
	truth, err := recon.Generate(ctx, recon.GenConfig{Warehouse: wh, Date: date, Invoices: 312, Mismatches: 40, Seed: 1,
		InboxDir: filepath.Join(*dir, "inbox"), ERPPath: filepath.Join(*dir, "erp.db"), TruthDir: filepath.Join(*dir, "truth")})
	if err != nil {
		return err
	}
	fmt.Printf("2. cairn dev with CAIRN_FAULTS=%s, then the start, by NATS\n", demoFault)
	first, err := startDev(ctx, self, env, *dir, "dev-1.log")
	if err != nil {
		return err
	}
	if err := publishStart(ctx, url, run, wh, date); err != nil {
		first.Process.Kill()
		return err
	}
	werr := first.Wait()
	var exit *exec.ExitError
	if !errors.As(werr, &exit) || exit.ExitCode() != 3 {
		return fmt.Errorf("the first cairn dev should have died at entry 24 of post-ledger (exit 3), ended with %v", werr)
	}
	fmt.Println("   the process died at entry 24 of post-ledger (exit code 3), as injected")
	fmt.Println("3. cairn dev again, on the same data")
	began := time.Now()
	second, err := startDev(ctx, self, env, *dir, "dev-2.log")
	if err != nil {
		return err
	}
	defer func() {
		_ = second.Process.Signal(os.Interrupt)
		_ = second.Wait()
	}()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	rec, err := waitDone(ctx, js, run, 5*time.Minute)
	if err != nil {
		return err
	}
	took := time.Since(began)
	return report(ctx, js, *dir, rec, truth, took)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startDev starts `cairn dev` as a child and waits for its "ready".
func startDev(ctx context.Context, self string, env []string, dir, logName string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(dir, logName))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "dev")
	cmd.Env = env
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			return nil, fmt.Errorf("cairn dev ended before it was ready (see %s)", logf.Name())
		}
		return cmd, nil
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return nil, fmt.Errorf("cairn dev not ready within 60 s (see %s)", logf.Name())
	case <-ctx.Done():
		cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

func publishStart(ctx context.Context, url, run, wh, date string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	body := fmt.Sprintf(`{"run_id":%q,"warehouse":%q,"date":%q}`, run, wh, date)
	_, err = js.Publish(ctx, events.RunStartSubject, []byte(body))
	return err
}

func waitDone(ctx context.Context, js jetstream.JetStream, run string, limit time.Duration) (*kc.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	kv, err := js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, run)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		r, err := kc.Decode(e.Value())
		if err != nil {
			return nil, err
		}
		switch r.Status {
		case kc.Done:
			return r, nil
		case kc.HandedOver, kc.Cancelled:
			return r, fmt.Errorf("run %s is %s: %s", run, r.Status, r.NextAction)
		}
	}
	return nil, fmt.Errorf("run %s not done within %s", run, limit)
}

// report prints what happened next to the ground truth.
func report(ctx context.Context, js jetstream.JetStream, dir string, rec *kc.Record, t recon.Truth, took time.Duration) error {
	counts, rerun, err := auditCounts(ctx, js, rec.RunID)
	if err != nil {
		return err
	}
	var skipped []string
	for _, s := range rec.Pipeline {
		if !rerun[s] {
			skipped = append(skipped, s)
		}
	}
	ledger, err := sql.Open("sqlite", filepath.Join(dir, "ledger.db"))
	if err != nil {
		return err
	}
	defer ledger.Close()
	erp, err := sql.Open("sqlite", filepath.Join(dir, "erp.db"))
	if err != nil {
		return err
	}
	defer erp.Close()
	var rows, keys, stock int
	var total int64
	_ = ledger.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT key), coalesce(sum(amount_paise),0) FROM ledger_entries WHERE run_id = ?`, rec.RunID).Scan(&rows, &keys, &total)
	_ = erp.QueryRowContext(ctx, `SELECT count(*) FROM stock_adjustments WHERE run_id = ?`, rec.RunID).Scan(&stock)
	mails, _ := filepath.Glob(filepath.Join(dir, "mail", "*.eml"))
	var wantTotal int64
	for _, a := range t.Adjustments {
		wantTotal += a.AmountPaise
	}
	fmt.Printf("4. the run is %s; resumed and finished in %s\n\n", rec.Status, took.Round(10*time.Millisecond))
	fmt.Printf("%-40s %-22s %s\n", "", "this run", "ground truth")
	line := func(what string, got, want any) {
		mark := "ok"
		if fmt.Sprint(got) != fmt.Sprint(want) {
			mark = "DIFFERS"
		}
		fmt.Printf("%-40s %-22v %-14v %s\n", what, got, want, mark)
	}
	fmt.Printf("%-40s %s\n", "steps skipped on resume", strings.Join(skipped, ", "))
	line("restarts recorded in the checkpoint", rec.Restarts, 1)
	line("extractor calls (none repeated)", counts["extractor.called"], t.Invoices+len(t.Parked))
	line("invoice documents loaded", counts["document.read"], t.Invoices+len(t.Parked))
	line("ledger rows", rows, len(t.Adjustments))
	line("distinct ledger keys", keys, len(t.Adjustments))
	line("ledger total (paise)", total, wantTotal)
	line("stock adjustments", stock, len(t.Adjustments))
	line("debit notes + report mailed", len(mails), len(t.DebitNotes)+1)
	line("report: invoices", t.Report.Invoices, t.Report.Invoices)
	line("report: total (paise)", t.Report.TotalPaise, wantTotal)
	fmt.Printf("\nmail in %s, databases %s and %s\n", filepath.Join(dir, "mail"), filepath.Join(dir, "ledger.db"), filepath.Join(dir, "erp.db"))
	if rows != len(t.Adjustments) || keys != len(t.Adjustments) || stock != len(t.Adjustments) || total != wantTotal ||
		len(mails) != len(t.DebitNotes)+1 || counts["extractor.called"] != t.Invoices+len(t.Parked) {
		return errors.New("the night differs from the ground truth")
	}
	return nil
}

// auditCounts reads the run's timeline: item events by kind, and the steps started after the
// first reassignment (the steps the resume ran).
func auditCounts(ctx context.Context, js jetstream.JetStream, run string) (map[string]int, map[string]bool, error) {
	evs, err := events.ReadSubject(ctx, js, assets.StreamAudit, events.AuditSubject(run))
	if err != nil {
		return nil, nil, err
	}
	counts := map[string]int{}
	rerun := map[string]bool{}
	resumed := false
	for _, e := range evs {
		var a events.Audit
		if e.Unmarshal(&a) != nil {
			continue
		}
		counts[a.Event]++
		if a.Event == "reassigned" {
			resumed = true
		}
		if resumed && a.Event == "step.started" {
			rerun[a.Step] = true
		}
	}
	return counts, rerun, nil
}
