// Package enrich is a long job of someone else's, put on Cairn with the public API alone:
// fetch records from a file, enrich each from three HTTP APIs side by side (profile: slow;
// geo: rate-limited; risk: times out on some records), validate once all three are
// verified, transform, and upload each to a system that enforces an idempotency key and a
// fencing token.
//
//	fetch ─┬─ profile ─┬─ validate ── transform ── upload
//	       ├─ geo ─────┤
//	       └─ risk ────┘
//
// It writes the job (Job: its steps in one list, each a typed function), where an upload
// is reversed (uploadUndo) and the calls to its outside systems (package records); Cairn does
// the rest: checkpoints, memoised answers, a shared rate limit, keyed and fenced uploads,
// handovers, and an undo of the run or of chosen records, newest first.
package enrich

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/undo"
)

// The job's steps, in the order declared: profile, geo and risk run side by side after
// fetch, validate after the three.
const (
	Fetch     = "fetch"
	Profile   = "profile"
	Geo       = "geo"
	Risk      = "risk"
	Validate  = "validate"
	Transform = "transform"
	Upload    = "upload"
)

// RateSetting names the setting of the geo API's declared rate, kept for every instance at
// once in cairn-enrich-limits (app.Config.Limits, GeoLimit); a 429's Retry-After is held for
// all of them.
const RateSetting = "ENRICH_GEO_RPS"

// ParamSource is the one member of a run's input: the path of the records file.
const ParamSource = "source"

// Space is the job's share of the NATS account, named after it: its streams (CAIRN_ENRICH_*),
// buckets (cairn-enrich-*) and subjects (cairn.enrich.*).
var Space = assets.MustSpace("enrich")

// Pipeline is the job's definition, for what reads it without the outside systems (the
// fault map, a registration, the tests).
var Pipeline = func() app.Job { j, _ := Job(Config{}); return j }().Pipeline()

// Config is where the job's outside systems are.
type Config struct {
	APIs      records.Client // the three enrichment APIs
	UploadURL string         // the upload system's base URL
	// CallTimeout bounds one API call (default 2s): a call that takes longer fails the try,
	// which is retried (Attempt.Retry), and then the attempt.
	CallTimeout time.Duration
}

// Job is the job against the outside systems of c.
func Job(c Config) (app.Job, error) {
	c.CallTimeout = cmp.Or(c.CallTimeout, 2*time.Second)
	if c.APIs.HTTP == nil {
		c.APIs.HTTP = &http.Client{}
	}
	client, err := httpidem.NewClient(httpidem.ClientConfig{CallTimeout: c.CallTimeout})
	if err != nil {
		return app.Job{}, err
	}
	fetch := app.Read(Fetch, runner.Func(fetchRecords))
	fetch.Leased = true
	fetch.Checkpoint = "the records read, with the file's sha256: the source fingerprint upload checks after a break"

	profile := app.Call(Profile, apiStep(c, Profile, records.ParseProfile, c.APIs.Profile)).After(Fetch)
	geo := app.Call(Geo, apiStep(c, Geo, records.ParseGeo, c.APIs.Geo)).After(Fetch)
	geo.RateLimit = RateSetting // its limit, app.Config.Limits[RateSetting], is kept by the runner
	risk := app.Call(Risk, apiStep(c, Risk, records.ParseRisk, c.APIs.Risk)).After(Fetch)

	up := uploader{url: c.UploadURL, client: client}
	upload := app.Write(Upload, &runner.Typed[[]records.Upload, uploaded]{Do: up.run, Verify: up.verify, Plan: up.plan,
		RaiseFences: func(ctx context.Context, a *runner.Attempt, t fence.Token) error {
			return client.RaiseFence(ctx, c.UploadURL+"/v1/fences", t)
		},
		CheckSource: checkSource})
	upload.Effects = "one row per record in the upload system"
	upload.Key = "<run>:upload:<record id>, the Idempotency-Key the upload system enforces (same payload: the stored answer; another: 422, handover); fenced by the run's token (Cairn-Run, Cairn-Fence-Token)"
	upload.Compensation = "each upload reversed by the upload system (POST /v1/uploads/<key>/reversal, keyed <key>:rev, fenced by the undo's token), once however often the undo is repeated; " +
		"cairn undo RUN --pipeline enrich --attr record=<id> reverses that record's alone"

	return app.Job{Name: "enrich", Input: []string{ParamSource}, // a start carries the source, a path, alone
		NaturalKey: "the records file; a second start of the same file is refused, naming the first run",
		Systems:    map[string]undo.System{SystemUpload: uploadUndo(c, client)},
		Steps: []app.Step{fetch, profile, geo, risk,
			app.Compute(Validate, runner.Func(validate)).After(Profile, Geo, Risk),
			app.Compute(Transform, runner.Func(transform)), upload}}, nil
}

// input is a run's input.
type input struct {
	Source string `json:"source"`
}

// fetched is fetch's output.
type fetched struct {
	Digest  string           `json:"digest"`
	Records []records.Record `json:"records"`
}

func fetchRecords(ctx context.Context, a *runner.Attempt, in input) (fetched, error) {
	digest, err := fileDigest(in.Source)
	if err != nil {
		return fetched{}, runner.Permanent(fmt.Errorf("reading the records file %s: %w", in.Source, err))
	}
	recs, err := records.Read(in.Source)
	if err != nil {
		return fetched{}, runner.Permanent(err)
	}
	a.Fingerprint(digest) // what upload checks after a break
	a.Count(len(recs))
	a.Next(fmt.Sprintf("enrich %d records", len(recs)))
	return fetched{Digest: digest, Records: recs}, nil
}

// fileDigest is "sha256:<hex>" of the file at path.
func fileDigest(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:]), nil
}

// checkSource names the records file when it is no longer what fetch read (fingerprint).
func checkSource(ctx context.Context, a *runner.Attempt, fingerprint string) ([]string, error) {
	path := a.Params.String(ParamSource)
	digest, err := fileDigest(path)
	if err != nil {
		return []string{path + " (unreadable: " + err.Error() + ")"}, nil
	}
	if digest != fingerprint {
		return []string{path + " (" + fingerprint + " when fetched, " + digest + " now)"}, nil
	}
	return nil, nil
}

// GeoLimit is the geo API's limit at rate calls a second, shared by every instance.
func GeoLimit(rate float64) ratelimit.Limit {
	return ratelimit.Limit{Bucket: Space.Bucket(assets.BucketLimits), Key: "geo", PerSecond: rate}
}

// enriched is an enrichment step's output: each record's enrichment, by record id.
type enriched[T any] map[string]T

// apiStep is one of the three enrichment steps: it asks its API (api, also its answers'
// memo key prefix) for every fetched record in turn, each answer memoised word for word
// (after a slot of the step's declared limit, if it has one), each call bounded by
// CallTimeout and retried in the attempt when it fails for a while (a timeout, a 429, a 5xx).
func apiStep[T any](c Config, api string, parse func([]byte) (T, error), ask func(context.Context, string) (T, []byte, error)) *runner.Typed[fetched, enriched[T]] {
	call := func(ctx context.Context, a *runner.Attempt, id string) ([]byte, error) {
		callCtx, cancel := context.WithTimeout(ctx, c.CallTimeout)
		defer cancel()
		_, b, err := ask(callCtx, id)
		var tooMany *records.TooManyError
		if errors.As(err, &tooMany) {
			_ = a.Hold(ctx, tooMany.RetryAfter) // every instance waits it out
		}
		if err != nil && records.IsTemporary(err) {
			return nil, runner.Temporary(err)
		}
		return b, err
	}
	step := runner.Func(func(ctx context.Context, a *runner.Attempt, f fetched) (enriched[T], error) {
		out := make(enriched[T], len(f.Records))
		for i, rec := range f.Records {
			var answer []byte
			err := a.Retry(ctx, func(int) error {
				var err error
				answer, err = a.Memo(ctx, api+"."+rec.ID, func(ctx context.Context) ([]byte, error) { return call(ctx, a, rec.ID) })
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("the %s API for record %d (%s): %w", api, i+1, rec.ID, err)
			}
			if out[rec.ID], err = parse(answer); err != nil {
				return nil, fmt.Errorf("the %s API's answer for record %d (%s): %w", api, i+1, rec.ID, err)
			}
		}
		a.Next(fmt.Sprintf("validate %d records once profile, geo and risk are verified", len(f.Records)))
		return out, nil
	})
	// What the step made durable, its API's memoised answers: the loop guard counts attempts
	// that add none, so a record that times out every time is handed over, while a slow
	// night that advances is not.
	step.Progress = func(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
		n, err := a.Memoised(ctx, api+".")
		return runner.Progress{Memoised: n, Where: "nats kv ls " + Space.Bucket(assets.BucketMemo) + " | grep '^" + a.RunID + "\\." + api + "\\.'"}, err
	}
	return step
}

// validate puts the fetched records and the three enrichments together, in fetch's order,
// and parks each invalid record with its reason.
func validate(ctx context.Context, a *runner.Attempt, in struct {
	Profile enriched[records.Profile] `json:"profile"`
	Geo     enriched[records.Geo]     `json:"geo"`
	Risk    enriched[records.Risk]    `json:"risk"`
}) ([]records.Enriched, error) {
	f, err := runner.In[fetched](ctx, a, Fetch)
	if err != nil {
		return nil, err
	}
	valid := make([]records.Enriched, 0, len(f.Records))
	for i, rec := range f.Records {
		e := records.Enriched{Record: rec}
		var ok [3]bool
		e.Profile, ok[0] = in.Profile[rec.ID]
		e.Geo, ok[1] = in.Geo[rec.ID]
		e.Risk, ok[2] = in.Risk[rec.ID]
		if j := slices.Index(ok[:], false); j >= 0 {
			return nil, runner.Permanent(fmt.Errorf("record %d (%s) has no answer in %s's output", i+1, rec.ID, []string{Profile, Geo, Risk}[j]))
		}
		if err := records.Validate(e); err != nil {
			a.Park(rec.ID, err.Error())
			continue
		}
		valid = append(valid, e)
	}
	a.Count(len(f.Records))
	a.Next(fmt.Sprintf("transform %d valid records (%d parked)", len(valid), len(f.Records)-len(valid)))
	return valid, nil
}

func transform(ctx context.Context, a *runner.Attempt, in []records.Enriched) ([]records.Upload, error) {
	out := make([]records.Upload, len(in))
	for i, e := range in {
		out[i] = records.Transform(e)
	}
	a.Next(fmt.Sprintf("upload %d records", len(out)))
	return out, nil
}
