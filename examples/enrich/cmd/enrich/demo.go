package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/plain"
	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/app"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The demo's story, as the seed tells it.
const (
	demoRecords   = 200
	demoHung      = "rec-0007" // the risk API times out on record 7 ...
	demoHangs     = 4          // ... more often than an attempt retries it (3 tries)
	demoCrashAt   = 40         // and the machine dies after the 40th upload
	demoTimeout   = 500 * time.Millisecond
	demoGeoRate   = 20 // the geo API's real limit, calls a second
	demoGeoPacing = 15 // Cairn's declared limit for it
)

// tally is what one run of a job cost, read from its outside systems.
type tally struct {
	calls    map[string]int
	repeated int // calls of an API for a record beyond its first
	tooMany  int
	uploads  int
	records  int
	dups     int
	took     time.Duration
	restarts int
	status   string
	rec      *kc.Record // a Cairn run's record as it ended
}

func tallyOf(c stubapi.Counts, took time.Duration) tally {
	t := tally{calls: c.Calls, tooMany: c.TooMany, uploads: c.Uploads, records: c.Records, dups: c.Duplicates, took: took}
	for _, api := range []string{"profile", "geo", "risk"} {
		for _, n := range c.PerRecord[api] {
			t.repeated += n - 1
		}
	}
	return t
}

// demo runs the job four times against stub APIs of its own: on Cairn and as a plain
// restart-from-step-one script, each once undisturbed and once through the seed's failures
// (the risk API timing out on record 7, the process killed after the 40th upload), and
// prints what each cost.
func demo(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "enrich-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	source := filepath.Join(dir, "records.jsonl")
	if _, err := records.Generate(source, demoRecords, 1); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d records; the risk API times out on %s (%d times), the job is killed after upload %d\n\n", demoRecords, demoHung, demoHangs, demoCrashAt)
	results := map[string]tally{}
	for _, c := range []struct {
		name   string
		failed bool
	}{{"cairn", false}, {"cairn", true}, {"plain", false}, {"plain", true}} {
		label := c.name
		if c.failed {
			label += ", failures"
		}
		fmt.Fprintf(w, "running %s ...\n", label)
		sc := stubapi.Config{Dir: filepath.Join(dir, fmt.Sprintf("%s-%t", c.name, c.failed)), GeoRate: demoGeoRate, HangFor: 10 * time.Second}
		if c.failed {
			sc.Hang = map[string]int{demoHung: demoHangs}
		}
		if err := os.MkdirAll(sc.Dir, 0o755); err != nil {
			return err
		}
		apis, err := stubapi.Start(sc)
		if err != nil {
			return err
		}
		var t tally
		if c.name == "cairn" {
			t, err = demoCairn(ctx, sc.Dir, source, apis, c.failed)
		} else {
			t, err = demoPlain(ctx, source, apis, c.failed)
		}
		apis.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		results[label] = t
	}
	printTable(w, results)
	return printTimings(w, []*kc.Record{results["cairn"].rec, results["cairn, failures"].rec})
}

// printTimings prints what the two Cairn runs' records show of each step, as `cairn
// faultmap --pipeline enrich` reads them from the job's recent runs: how long it took and
// what a crash there loses.
func printTimings(w io.Writer, recs []*kc.Record) error {
	m, err := analyze(demoGeoPacing)
	if err != nil {
		return err
	}
	m.Observe(recs)
	fmt.Fprintf(w, "\nthe two Cairn runs' records, step by step (cairn faultmap --pipeline enrich reads the latest runs so):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  step\tafter\tlongest\tretried\ta crash there loses")
	for _, st := range m.Steps {
		longest, retried := "-", 0
		if o := st.Observed; o != nil {
			longest, retried = (time.Duration(o.MaxMS) * time.Millisecond).String(), o.Retried
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", st.Name, cmp.Or(strings.Join(st.After, ","), "-"), longest, retried, st.Loss)
	}
	return tw.Flush()
}

func demoCairn(ctx context.Context, dir, source string, apis *stubapi.APIs, failed bool) (tally, error) {
	srv, err := app.Embedded("enrich-demo", "127.0.0.1", -1, filepath.Join(dir, "nats"))
	if err != nil {
		return tally{}, err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return tally{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return tally{}, err
	}
	if err := app.Init(ctx, initConfig(js, dir)); err != nil {
		return tally{}, err
	}
	bin, err := os.Executable()
	if err != nil {
		return tally{}, err
	}
	f := &Fleet{Bin: bin, Env: []string{
		"ENRICH_AS_MAIN=1", "CAIRN_NATS_URL=" + srv.ClientURL(), "ENRICH_DATA_DIR=" + dir,
		"ENRICH_PROFILE_URL=" + apis.ProfileURL, "ENRICH_GEO_URL=" + apis.GeoURL, "ENRICH_RISK_URL=" + apis.RiskURL, "ENRICH_UPLOAD_URL=" + apis.UploadURL,
		fmt.Sprintf("ENRICH_CALL_TIMEOUT=%s", demoTimeout), fmt.Sprintf("ENRICH_GEO_RPS=%d", demoGeoPacing),
		"CAIRN_LEASE=3s", "CAIRN_HEARTBEAT=1s", "CAIRN_ACK_WAIT=3s",
	}}
	if failed {
		f.Env = append(f.Env, fmt.Sprintf("CAIRN_FAULTS=upload.after-write.%d=exit@once", demoCrashAt))
	}
	log, err := os.Create(filepath.Join(dir, "services.log"))
	if err != nil {
		return tally{}, err
	}
	defer log.Close()
	began := time.Now()
	if err := f.Start(ctx, log); err != nil {
		return tally{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		f.Stop(sctx)
	}()
	runID := "enrich-demo"
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := app.Start(wctx, js, enrich.Pipeline.Name, runID, map[string]any{enrich.ParamSource: source}); err != nil {
		return tally{}, err
	}
	rec, err := app.Wait(wctx, js, enrich.Pipeline.Name, runID)
	if err != nil {
		return tally{}, err
	}
	t := tallyOf(apis.Counts(), time.Since(began))
	t.restarts = f.Restarts() // the processes started again, then each enrichment step's attempts after its first
	for _, s := range []string{enrich.Profile, enrich.Geo, enrich.Risk} {
		t.restarts += rec.Steps[s].Attempts
	}
	t.status, t.rec = string(rec.Status), rec
	if rec.Status != kc.Done {
		return t, fmt.Errorf("the run ended %s: %v", rec.Status, rec.Handover)
	}
	return t, nil
}

func demoPlain(ctx context.Context, source string, apis *stubapi.APIs, failed bool) (tally, error) {
	crashed := false
	c := plain.Config{
		Records:     source,
		APIs:        records.Client{ProfileURL: apis.ProfileURL, GeoURL: apis.GeoURL, RiskURL: apis.RiskURL, HTTP: &http.Client{}},
		UploadURL:   apis.UploadURL,
		CallTimeout: demoTimeout,
	}
	if failed {
		c.Crash = func(step string, n int) bool {
			if step == "upload" && n == demoCrashAt && !crashed {
				crashed = true
				return true
			}
			return false
		}
	}
	began := time.Now()
	r, err := plain.Run(ctx, c)
	t := tallyOf(apis.Counts(), time.Since(began))
	t.restarts = r.Restarts
	t.status = "done"
	if err != nil {
		t.status = "failed"
	}
	return t, err
}

// printTable prints the runs side by side, and what the failures cost each job: the
// difference from its undisturbed run.
func printTable(w io.Writer, r map[string]tally) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []string{"cairn", "cairn, failures", "plain", "plain, failures"}
	fmt.Fprintln(w)
	fmt.Fprint(tw, "\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s\t", c)
	}
	fmt.Fprintln(tw)
	row := func(name string, v func(t tally) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", v(r[c]))
		}
		fmt.Fprintln(tw)
	}
	for _, api := range []string{"profile", "geo", "risk", "upload"} {
		row(api+" API calls", func(t tally) string { return fmt.Sprint(t.calls[api]) })
	}
	row("calls repeated", func(t tally) string { return fmt.Sprint(t.repeated) })
	row("429s received", func(t tally) string { return fmt.Sprint(t.tooMany) })
	row("records uploaded", func(t tally) string { return fmt.Sprint(t.records) })
	row("duplicate uploads", func(t tally) string { return fmt.Sprint(t.dups) })
	row("restarts", func(t tally) string { return fmt.Sprint(t.restarts) })
	row("wall time", func(t tally) string { return t.took.Round(100 * time.Millisecond).String() })
	tw.Flush()
	lost := func(job string) time.Duration { return r[job+", failures"].took - r[job].took }
	fmt.Fprintf(w, "\nthe failures cost cairn %s and %d repeated calls; the plain job %s, %d repeated calls and %d duplicate uploads\n",
		lost("cairn").Round(100*time.Millisecond), r["cairn, failures"].repeated, lost("plain").Round(100*time.Millisecond),
		r["plain, failures"].repeated, r["plain, failures"].dups)
	if c := r["cairn, failures"]; c.calls["upload"] > c.uploads {
		fmt.Fprintf(w, "cairn's %d upload calls beyond its %d rows are the killed attempt's uploads sent again under their keys: the upload system answers them from its store and writes no row\n",
			c.calls["upload"]-c.uploads, c.uploads)
	}
}
