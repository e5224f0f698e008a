// Package plain is the enrich job written with no durability, as people write it
// today: one function runs fetch, enrich, validate, transform and upload in order,
// holding everything in memory, and any failure throws the run away and starts it
// again from step one, up to a number of restarts. Uploads carry no Idempotency-Key, so
// a run that dies after some uploads uploads them again. A demo runs it next to the
// Cairn job (package enrich) against its own stubapi instance to compare the two.
package plain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cairnhq/cairn/examples/enrich/records"
)

// Defaults of a [Config].
const (
	DefaultMaxRestarts = 5
	DefaultCallTimeout = 2 * time.Second
	// maxTooMany bounds the 429s one call waits out before the run fails.
	maxTooMany = 50
)

// The steps, as Crash and errors name them.
const (
	StepFetch     = "fetch"
	StepEnrich    = "enrich"
	StepValidate  = "validate"
	StepTransform = "transform"
	StepUpload    = "upload"
)

// APIUpload is the upload system's name in Report.Calls (the others are records'
// APIProfile, APIGeo and APIRisk).
const APIUpload = "upload"

// ErrCrashed marks a run that Config.Crash killed.
var ErrCrashed = errors.New("simulated crash")

// Config is what the plain job runs on.
type Config struct {
	// Records is the JSON-lines file of records (records.Generate writes one).
	Records string
	// APIs calls the three enrichment APIs; its HTTP client also makes the uploads.
	APIs records.Client
	// UploadURL is the upload system's base URL: the job POSTs to UploadURL/v1/uploads.
	UploadURL string
	// MaxRestarts is how many times a failed run is started again (default 5).
	MaxRestarts int
	// CallTimeout bounds each HTTP call (default 2s).
	CallTimeout time.Duration
	// Crash, when set, is asked before each item of the enrich and upload steps, with
	// the step and n, the number of that step's items this run has done (so n is the
	// 0-based index of the next item); true kills the run there, as a process dying
	// would, losing all it held in memory.
	Crash func(step string, n int) bool
}

func (c Config) withDefaults() Config {
	if c.MaxRestarts == 0 {
		c.MaxRestarts = DefaultMaxRestarts
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Records == "":
		return errors.New("no records file")
	case c.UploadURL == "":
		return errors.New("no upload URL")
	case c.MaxRestarts < 0:
		return fmt.Errorf("MaxRestarts %d is negative", c.MaxRestarts)
	case c.CallTimeout < 0:
		return fmt.Errorf("CallTimeout %s is negative", c.CallTimeout)
	}
	return nil
}

// Report is what a Run did, over all its runs.
type Report struct {
	// Restarts is how many times the job started again from step one.
	Restarts int
	// Calls is the HTTP calls the job made per API ("profile", "geo", "risk",
	// "upload"), counted client-side, 429s included.
	Calls map[string]int
	// TooMany is the 429 answers the job received (and waited out).
	TooMany int
	// Uploaded is the uploads answered 201, in every run.
	Uploaded int
	// Invalid is the records the last run's validate step skipped.
	Invalid int
	// Redone is the wall time of the runs that failed: work thrown away.
	Redone time.Duration
	// Took is the wall time of the whole job.
	Took time.Duration
}

// Run runs the job, starting it again from step one after each failure, up to
// MaxRestarts times. It returns the report and nil when a run completed, or the last
// run's error when none did (or ctx ended).
func Run(ctx context.Context, c Config) (Report, error) {
	if err := c.validate(); err != nil {
		return Report{}, fmt.Errorf("plain enrich job: %w", err)
	}
	c = c.withDefaults()
	j := &job{cfg: c, rep: Report{Calls: map[string]int{}}}
	began := time.Now()
	for {
		runBegan := time.Now()
		err := j.run(ctx)
		if err == nil {
			break
		}
		j.rep.Redone += time.Since(runBegan)
		if ctx.Err() != nil || j.rep.Restarts >= c.MaxRestarts {
			j.rep.Took = time.Since(began)
			return j.report(), fmt.Errorf("plain enrich job, after %d restarts: %w", j.rep.Restarts, err)
		}
		j.rep.Restarts++
	}
	j.rep.Took = time.Since(began)
	return j.report(), nil
}

// job is one Run: the config and the report, which outlives each run (it is the
// observer's, not the job's memory).
type job struct {
	cfg Config
	mu  sync.Mutex // guards rep's counters during the enrich step's goroutines
	rep Report
}

func (j *job) report() Report {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.rep
	r.Calls = make(map[string]int, len(j.rep.Calls))
	for k, v := range j.rep.Calls {
		r.Calls[k] = v
	}
	return r
}

func (j *job) count(f func(*Report)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f(&j.rep)
}

// run is one run of the five steps, everything in memory.
func (j *job) run(ctx context.Context) error {
	recs, err := records.Read(j.cfg.Records)
	if err != nil {
		return fmt.Errorf("%s: %w", StepFetch, err)
	}
	enriched := make([]records.Enriched, 0, len(recs))
	for i, r := range recs {
		if err := j.crash(StepEnrich, i); err != nil {
			return err
		}
		e, err := j.enrich(ctx, r)
		if err != nil {
			return fmt.Errorf("%s %s: %w", StepEnrich, r.ID, err)
		}
		enriched = append(enriched, e)
	}
	valid := enriched[:0:0]
	invalid := 0
	for _, e := range enriched {
		if records.Validate(e) != nil {
			invalid++
			continue
		}
		valid = append(valid, e)
	}
	j.count(func(r *Report) { r.Invalid = invalid })
	uploads := make([]records.Upload, 0, len(valid))
	for _, e := range valid {
		uploads = append(uploads, records.Transform(e))
	}
	for i, u := range uploads {
		if err := j.crash(StepUpload, i); err != nil {
			return err
		}
		if err := j.upload(ctx, u); err != nil {
			return fmt.Errorf("%s %s: %w", StepUpload, u.ID, err)
		}
	}
	return nil
}

// crash is the simulated death before item n of step, when Config.Crash says so.
func (j *job) crash(step string, n int) error {
	if j.cfg.Crash != nil && j.cfg.Crash(step, n) {
		return fmt.Errorf("%w before item %d of %s", ErrCrashed, n, step)
	}
	return nil
}

// enrich makes the record's three calls side by side and waits for all of them; the
// first failure (profile, geo, risk in that order) fails the record.
func (j *job) enrich(ctx context.Context, r records.Record) (records.Enriched, error) {
	e := records.Enriched{Record: r}
	var errs [3]error
	var wg sync.WaitGroup
	wg.Go(func() {
		errs[0] = j.call(ctx, records.APIProfile, func(ctx context.Context) (err error) {
			e.Profile, _, err = j.cfg.APIs.Profile(ctx, r.ID)
			return err
		})
	})
	wg.Go(func() {
		errs[1] = j.call(ctx, records.APIGeo, func(ctx context.Context) (err error) {
			e.Geo, _, err = j.cfg.APIs.Geo(ctx, r.ID)
			return err
		})
	})
	wg.Go(func() {
		errs[2] = j.call(ctx, records.APIRisk, func(ctx context.Context) (err error) {
			e.Risk, _, err = j.cfg.APIs.Risk(ctx, r.ID)
			return err
		})
	})
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return records.Enriched{}, err
		}
	}
	return e, nil
}

// call makes one API call under the call timeout, counting it, and waits out each 429
// as its Retry-After says (at least a second when it says nothing) before calling again.
func (j *job) call(ctx context.Context, api string, do func(context.Context) error) error {
	for tries := 1; ; tries++ {
		j.count(func(r *Report) { r.Calls[api]++ })
		cctx, cancel := context.WithTimeout(ctx, j.cfg.CallTimeout)
		err := do(cctx)
		cancel()
		var tm *records.TooManyError
		if !errors.As(err, &tm) {
			return err
		}
		j.count(func(r *Report) { r.TooMany++ })
		if tries >= maxTooMany {
			return fmt.Errorf("%d answers of 429 in a row: %w", tries, err)
		}
		wait := max(tm.RetryAfter, time.Second)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting %s as the %s API asked: %w", wait, api, ctx.Err())
		}
	}
}

// upload POSTs u with no Idempotency-Key; only a 201 is success.
func (j *job) upload(ctx context.Context, u records.Upload) error {
	b, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("encoding the upload: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, j.cfg.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.cfg.UploadURL+"/v1/uploads", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("upload API: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := j.cfg.APIs.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	j.count(func(r *Report) { r.Calls[APIUpload]++ })
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("upload API: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("upload API: POST /v1/uploads: status %d: %s", resp.StatusCode, body)
	}
	j.count(func(r *Report) { r.Uploaded++ })
	return nil
}
