package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/chaos"
	"github.com/cairnhq/cairn/internal/devproc"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"

	"github.com/cairnhq/cairn/internal/sqlitefile"
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
	first, err := devproc.Start(self, env, filepath.Join(*dir, "dev-1.log"), time.Minute)
	if err != nil {
		return err
	}
	if err := publishStart(ctx, url, run, wh, date); err != nil {
		first.Stop(10 * time.Second)
		return err
	}
	if code, err := first.Wait(5 * time.Minute); err != nil || code != 3 {
		first.Stop(10 * time.Second)
		return fmt.Errorf("the first cairn dev should have died at entry 24 of post-ledger (exit 3), ended with code %d (%v)", code, err)
	}
	fmt.Println("   the process died at entry 24 of post-ledger (exit code 3), as injected")
	fmt.Println("3. cairn dev again, on the same data")
	began := time.Now()
	second, err := devproc.Start(self, env, filepath.Join(*dir, "dev-2.log"), time.Minute)
	if err != nil {
		return err
	}
	defer second.Stop(20 * time.Second)
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	p, err := openOne(fctx, js, "")
	if err != nil {
		return err
	}
	if err := follow(fctx, os.Stdout, js, p, run); err != nil {
		return err
	}
	rec, err := chaos.WaitDone(ctx, js, run, time.Minute)
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
	for _, f := range []string{"ledger.db", "erp.db"} {
		if err := sqlitefile.Private(filepath.Join(dir, f)); err != nil {
			return err
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
	sent, err := sentReport(ctx, js, rec)
	if err != nil {
		return err
	}
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
	line("report: invoices", sent.Invoices, t.Report.Invoices)
	line("report: lines", sent.Lines, t.Report.Lines)
	line("report: adjustments", sent.Adjustments, t.Report.Adjustments)
	line("report: total (paise)", sent.TotalPaise, wantTotal)
	fmt.Printf("\nmail in %s, databases %s and %s\n", filepath.Join(dir, "mail"), filepath.Join(dir, "ledger.db"), filepath.Join(dir, "erp.db"))
	if rows != len(t.Adjustments) || keys != len(t.Adjustments) || stock != len(t.Adjustments) || total != wantTotal ||
		len(mails) != len(t.DebitNotes)+1 || counts["extractor.called"] != t.Invoices+len(t.Parked) ||
		sent.Invoices != t.Report.Invoices || sent.TotalPaise != wantTotal {
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

// sentReport reads the summary the report step sent, from its checkpointed output.
func sentReport(ctx context.Context, js jetstream.JetStream, rec *kc.Record) (recon.Report, error) {
	var out struct {
		Report recon.Report `json:"report"`
	}
	store, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		return out.Report, err
	}
	b, err := store.Load(ctx, rec.Step("report").Output)
	if err != nil {
		return out.Report, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out.Report, fmt.Errorf("the report's output: %w", err)
	}
	return out.Report, nil
}
