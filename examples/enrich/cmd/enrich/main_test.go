package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/examples/enrich"
	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/examples/enrich/stubapi"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/httpidem"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The test binary is the enrich binary too: started with ENRICH_AS_MAIN=1 it runs main, so
// the services run as real processes, killed and restarted, with no second build.
func TestMain(m *testing.M) {
	if os.Getenv("ENRICH_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// job is one test's job: its NATS server, its outside systems, its records and its
// services' processes.
type job struct {
	t       *testing.T
	dir     string
	js      jetstream.JetStream
	apis    *stubapi.APIs
	source  string
	records []records.Record
	fleet   *Fleet
}

// newJob starts a NATS server and the stub APIs, writes n records, and inits the job.
func newJob(t *testing.T, n int, sc stubapi.Config) *job {
	t.Helper()
	dir := t.TempDir()
	srv, err := app.Embedded("enrich-test", "127.0.0.1", -1, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sc.Dir = filepath.Join(dir, "upload")
	if err := os.MkdirAll(sc.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	apis, err := stubapi.Start(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apis.Close)
	source := filepath.Join(dir, "records.jsonl")
	recs, err := records.Generate(source, n, 1)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{t: t, dir: dir, js: js, apis: apis, source: source, records: recs}
	if err := app.Init(t.Context(), initConfig(js, dir)); err != nil {
		t.Fatal(err)
	}
	j.fleet = &Fleet{Bin: os.Args[0], Env: []string{
		"ENRICH_AS_MAIN=1",
		"CAIRN_NATS_URL=" + srv.ClientURL(),
		"ENRICH_DATA_DIR=" + dir,
		"ENRICH_PROFILE_URL=" + apis.ProfileURL, "ENRICH_GEO_URL=" + apis.GeoURL, "ENRICH_RISK_URL=" + apis.RiskURL,
		"ENRICH_UPLOAD_URL=" + apis.UploadURL,
		"ENRICH_CALL_TIMEOUT=2s", "ENRICH_GEO_RPS=15", // below the geo API's 20 a second: no 429
		"CAIRN_LEASE=3s", "CAIRN_HEARTBEAT=1s", "CAIRN_ACK_WAIT=3s",
	}}
	return j
}

// run starts the services (with env on top: CAIRN_FAULTS), starts a run of the records
// and waits for it to end.
func (j *job) run(runID string, env ...string) *kc.Record {
	j.t.Helper()
	log, err := os.Create(filepath.Join(j.dir, "services-"+runID+".log"))
	if err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() { log.Close() })
	j.fleet.Env = append(j.fleet.Env, env...)
	ctx, cancel := context.WithTimeout(j.t.Context(), 3*time.Minute)
	defer cancel()
	// The fleet restarts a dead process until the test ends, not only while the run runs:
	// an undo after it is served by the same fleet.
	if err := j.fleet.Start(j.t.Context(), log); err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		j.fleet.Stop(sctx)
	})
	if err := app.Start(ctx, j.js, enrich.Pipeline.Name, runID, map[string]any{enrich.ParamSource: j.source}); err != nil {
		j.t.Fatal(err)
	}
	rec, err := app.Wait(ctx, j.js, enrich.Pipeline.Name, runID)
	if err != nil {
		b, _ := os.ReadFile(log.Name())
		j.t.Fatalf("%v; last record %+v\nservices' log:\n%s", err, rec, tail(b, 4000))
	}
	return rec
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// enrichSteps are the enrichment steps, each named after its API.
var enrichSteps = []string{enrich.Profile, enrich.Geo, enrich.Risk}

// valid is how many of the job's records Validate takes.
func (j *job) valid() int {
	n := 0
	for _, r := range j.records {
		if records.Validate(records.Enriched{Record: r, Risk: records.Risk{Score: 50}}) == nil {
			n++
		}
	}
	return n
}

// checkOnce checks the run ended done, each valid record uploaded exactly once and each
// API asked once per record, but for extra calls of the APIs' records in extra.
func (j *job) checkOnce(rec *kc.Record, extra map[string]map[string]int) {
	j.t.Helper()
	j.checkOnceBut(rec, extra, nil)
}

// checkOnceBut is checkOnce allowing, beyond extra, up to lost[api] records of an API
// asked once more: the calls in flight when a process died. A kill -9 stops every step
// the process was running, and the enrichment steps run side by side: one killed at its
// own crash point (between two records, all its answers memoised) takes down the call
// its siblings were making, whose answer was never received, so never memoised.
func (j *job) checkOnceBut(rec *kc.Record, extra map[string]map[string]int, lost map[string]int) {
	j.t.Helper()
	if rec.Status != kc.Done {
		j.t.Fatalf("run %s ended %s (handover %v), want done", rec.RunID, rec.Status, rec.Handover)
	}
	c := j.apis.Counts()
	if want := j.valid(); c.Records != want || c.Uploads != want || c.Duplicates != 0 {
		j.t.Errorf("uploads: %d rows of %d records (%d duplicates), want %d records once each", c.Uploads, c.Records, c.Duplicates, want)
	}
	for _, api := range []string{"profile", "geo", "risk"} {
		again := 0
		for _, r := range j.records {
			want := 1 + extra[api][r.ID]
			got := c.PerRecord[api][r.ID]
			if got != want && (lost[api] == 0 || got != want+1) {
				j.t.Errorf("%s API asked %d times for %s, want %d", api, got, r.ID, want)
			}
			if got == want+1 {
				again++
			}
		}
		if again > lost[api] {
			j.t.Errorf("%s API asked again for %d records, want at most %d (its calls in flight when a process died)", api, again, lost[api])
		} else if again > 0 {
			j.t.Logf("%s API asked again for %d records: its calls in flight when a process died", api, again)
		}
	}
	if got, want := len(rec.Steps[enrich.Validate].Parked), len(j.records)-j.valid(); got != want {
		j.t.Errorf("validate parked %d records, want %d", got, want)
	}
	j.checkRows()
}

// checkRows compares the upload system's rows with what an uninterrupted run uploads: the
// transform of each valid record enriched with the APIs' answers, once each.
func (j *job) checkRows() {
	j.t.Helper()
	rows, err := j.apis.Rows(j.t.Context(), "")
	if err != nil {
		j.t.Fatal(err)
	}
	got := map[string]records.Upload{}
	for _, r := range rows {
		var u records.Upload
		if err := json.Unmarshal([]byte(r.Body), &u); err != nil {
			j.t.Fatalf("row %d: %v", r.Seq, err)
		}
		got[r.RecordID] = u
	}
	for _, r := range j.records {
		region, tz := stubapi.GeoOf(r.ID)
		e := records.Enriched{Record: r, Profile: records.Profile{Segment: stubapi.ProfileOf(r.ID)},
			Geo: records.Geo{Region: region, Timezone: tz}, Risk: records.Risk{Score: stubapi.RiskOf(r.ID)}}
		u, ok := got[r.ID]
		switch {
		case records.Validate(e) != nil && ok:
			j.t.Errorf("record %s is invalid but was uploaded", r.ID)
		case records.Validate(e) == nil && !ok:
			j.t.Errorf("record %s is valid but was not uploaded", r.ID)
		case ok && u != records.Transform(e):
			j.t.Errorf("record %s uploaded as %+v, want %+v", r.ID, u, records.Transform(e))
		}
	}
}

// The seed's story: the risk API times out on record 7, more often than the attempt
// retries it; risk's attempt fails, the next resumes at record 7: no record before it is
// asked again, profile and geo (verified beside it) are not run again, each record is
// uploaded once.
func TestTimeoutAtRecordSeven(t *testing.T) {
	t.Parallel()
	j := newJob(t, 30, stubapi.Config{Hang: map[string]int{"rec-0007": 4}, HangFor: 10 * time.Second})
	rec := j.run("run-seven")
	j.checkOnce(rec, map[string]map[string]int{"risk": {"rec-0007": 4}})
	// A step's attempts count the ones after its first.
	if a := rec.Steps[enrich.Risk].Attempts; a < 1 {
		t.Errorf("risk has %d attempts after its first, want the failed one counted", a)
	}
	for _, s := range []string{enrich.Fetch, enrich.Profile, enrich.Geo, enrich.Validate, enrich.Transform, enrich.Upload} {
		if a := rec.Steps[s].Attempts; a != 0 {
			t.Errorf("%s has %d attempts after its first, want none", s, a)
		}
	}
	if c := j.apis.Counts(); c.TooMany != 0 {
		t.Errorf("the geo API sent %d 429s: the declared limit should keep under its rate", c.TooMany)
	}
}

// A kill -9 (a crash point that exits at once) at every step boundary and inside
// enrichment steps and upload: each run ends as an uninterrupted one, each record uploaded
// once, no API asked twice for a record whose answer was received; a crash point of one
// enrichment step may cost each of the two beside it the one call it had in flight.
func TestKilledAtEveryBoundary(t *testing.T) {
	t.Parallel()
	var cases []string
	for _, s := range enrich.Pipeline.Names() {
		cases = append(cases, s+".after-commit=exit@once")
	}
	cases = append(cases, "profile.after-write.5=exit@once", "risk.after-write.5=exit@once", "upload.before-write.3=exit@once", "upload.after-write.7=exit@once", "upload.lost-reply.9=exit@once")
	for i, f := range cases {
		t.Run(f, func(t *testing.T) {
			j := newJob(t, 12, stubapi.Config{})
			rec := j.run(fmt.Sprintf("run-kill-%d", i), "CAIRN_FAULTS="+f)
			var lost map[string]int
			if step, _, _ := strings.Cut(f, "."); slices.Contains(enrichSteps, step) {
				lost = map[string]int{}
				for _, s := range enrichSteps {
					if s != step {
						lost[s] = j.fleet.Restarts()
					}
				}
			}
			j.checkOnceBut(rec, nil, lost)
			if j.fleet.Restarts() < 1 {
				t.Errorf("the fault %s killed no process", f)
			}
		})
	}
}

// A kill -9 inside an enrichment: the process dies while the risk API holds record 5's
// call, the profile and geo answers of the record memoised beside it; the next process asks
// again for that call, and for profile's and geo's if they had one in flight, nothing else.
func TestKilledDuringAnEnrichmentCall(t *testing.T) {
	t.Parallel()
	j := newJob(t, 10, stubapi.Config{Hang: map[string]int{"rec-0005": 1}, HangFor: time.Minute})
	memo, err := j.js.KeyValue(t.Context(), enrich.Space.Bucket(assets.BucketMemo))
	if err != nil {
		t.Fatal(err)
	}
	memoised := func(key string) bool { _, err := memo.Get(t.Context(), key); return err == nil }
	go func() {
		for j.apis.Counts().Hung == 0 || !memoised("run-killed-in-call.profile.rec-0005") || !memoised("run-killed-in-call.geo.rec-0005") {
			select {
			case <-j.t.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = j.fleet.Kill()
	}()
	rec := j.run("run-killed-in-call", "ENRICH_CALL_TIMEOUT=30s")
	j.checkOnceBut(rec, map[string]map[string]int{"risk": {"rec-0005": 1}}, map[string]int{"profile": 1, "geo": 1})
	if j.fleet.Restarts() < 1 {
		t.Error("the process was not killed during the call")
	}
}

// The same records file started twice under two run ids: the second start is refused,
// naming the first run (app.Start returns the refusal), and nothing is uploaded again.
func TestSameInputStartedTwice(t *testing.T) {
	t.Parallel()
	j := newJob(t, 10, stubapi.Config{})
	j.checkOnce(j.run("run-first"), nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := app.Start(ctx, j.js, enrich.Pipeline.Name, "run-second", map[string]any{enrich.ParamSource: j.source})
	var refused *app.Refused
	if !errors.As(err, &refused) || refused.Holder != "run-first" {
		t.Fatalf("the second start: %v, want a refusal naming run-first", err)
	}
	rej := j.rejection("run-second")
	for _, want := range []string{"run run-first has this input already", "cairn rerun run-first --pipeline enrich --from STEP"} {
		if !strings.Contains(rej.Reason, want) {
			t.Errorf("the second start was rejected for %q, want one saying %q", rej.Reason, want)
		}
	}
	if _, _, err := j.store().Load(t.Context(), "run-second"); !errors.Is(err, kc.ErrNotFound) {
		t.Errorf("run-second has a record (%v): the input ran twice", err)
	}
	if c := j.apis.Counts(); c.Uploads != j.valid() {
		t.Errorf("%d uploads after the second start, want %d", c.Uploads, j.valid())
	}
}

// A zombie upload worker (a late write under the token of a lease since taken over) is
// refused by the upload system: the fence stands at the token of the attempt that
// uploaded, and a lower one writes nothing.
func TestZombieUploadRefused(t *testing.T) {
	t.Parallel()
	j := newJob(t, 6, stubapi.Config{})
	rec := j.run("run-zombie")
	j.checkOnce(rec, nil)
	cl, err := httpidem.NewClient(httpidem.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	before := j.apis.Counts()
	_, err = cl.Write(t.Context(), httpidem.Request{URL: j.apis.UploadURL + "/v1/uploads", Key: "run-zombie:upload:rec-9999",
		Run: "run-zombie", Token: 1, Body: []byte(`{"id":"rec-9999","name":"Late","email":"late@example.com","amount_paise":100}`)})
	if !errors.Is(err, httpidem.ErrFenced) {
		t.Fatalf("a write under token 1 after the run's upload: %v, want it fenced", err)
	}
	after := j.apis.Counts()
	if after.Uploads != before.Uploads || after.Fenced != before.Fenced+1 {
		t.Errorf("uploads %d -> %d, fenced %d -> %d: want no row and one refusal", before.Uploads, after.Uploads, before.Fenced, after.Fenced)
	}
}

// store reads the job's checkpoints.
func (j *job) store() *kc.Store {
	j.t.Helper()
	s, err := kc.Open(j.t.Context(), j.js, enrich.Space.Bucket(assets.BucketRuns))
	if err != nil {
		j.t.Fatal(err)
	}
	return s
}

// rejection waits for the rejection of a command of runID on cairn.rejected.
func (j *job) rejection(runID string) events.Rejected {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(j.t.Context(), time.Minute)
	defer cancel()
	c, err := j.js.OrderedConsumer(ctx, enrich.Space.Stream(assets.StreamRejected), jetstream.OrderedConsumerConfig{})
	if err != nil {
		j.t.Fatal(err)
	}
	for {
		m, err := c.Next(jetstream.FetchContext(ctx))
		if err != nil {
			j.t.Fatalf("no rejection of %s on %s: %v", runID, enrich.Space.Stream(assets.StreamRejected), err)
		}
		ev, err := events.Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		if err != nil || ev.Subject != runID {
			continue
		}
		var r events.Rejected
		if err := ev.Unmarshal(&r); err != nil {
			j.t.Fatal(err)
		}
		return r
	}
}
