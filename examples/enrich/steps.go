package enrich

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// Config is where the job's outside systems are.
type Config struct {
	APIs      records.Client // the three enrichment APIs
	UploadURL string         // the upload system's base URL
	// CallTimeout bounds one API call (default 2s): a call that takes longer fails the try,
	// which is retried (Attempt.Retry), and then the attempt.
	CallTimeout time.Duration
	// GeoRate is the geo API's declared rate, in calls per second (default 15), held for
	// every instance in cairn-enrich-limits.
	GeoRate float64
}

// Steps returns the job's step implementations for c, by step name.
func Steps(ctx context.Context, js jetstream.JetStream, c Config) (map[string]runner.Step, error) {
	c.CallTimeout = cmp.Or(c.CallTimeout, 2*time.Second)
	c.GeoRate = cmp.Or(c.GeoRate, 15)
	if c.APIs.HTTP == nil {
		c.APIs.HTTP = &http.Client{}
	}
	geo, err := ratelimit.New(ctx, ratelimit.Config{JS: js, Limit: GeoLimit(c.GeoRate)})
	if err != nil {
		return nil, fmt.Errorf("the geo API's limit: %w", err)
	}
	up, err := httpidem.NewClient(httpidem.ClientConfig{CallTimeout: c.CallTimeout})
	if err != nil {
		return nil, err
	}
	return map[string]runner.Step{
		Fetch: fetchStep{},
		Profile: apiStep[records.Profile]{api: Profile, c: c, parse: records.ParseProfile,
			do: func(ctx context.Context, id string) ([]byte, error) {
				_, b, err := c.APIs.Profile(ctx, id)
				return b, err
			}},
		Geo: apiStep[records.Geo]{api: Geo, c: c, parse: records.ParseGeo,
			do: func(ctx context.Context, id string) ([]byte, error) {
				if _, err := geo.Wait(ctx); err != nil {
					return nil, runner.Temporary(err)
				}
				_, b, err := c.APIs.Geo(ctx, id)
				var tooMany *records.TooManyError
				if errors.As(err, &tooMany) {
					_ = geo.Hold(ctx, tooMany.RetryAfter) // every instance waits it out
				}
				return b, err
			}},
		Risk: apiStep[records.Risk]{api: Risk, c: c, parse: records.ParseRisk,
			do: func(ctx context.Context, id string) ([]byte, error) {
				_, b, err := c.APIs.Risk(ctx, id)
				return b, err
			}},
		Validate:  validateStep{},
		Transform: transformStep{},
		Upload:    uploadStep{url: c.UploadURL, client: up},
	}, nil
}

// GeoLimit is the geo API's limit at rate calls a second, shared by every instance.
func GeoLimit(rate float64) ratelimit.Limit {
	return ratelimit.Limit{Bucket: Space.Bucket(assets.BucketLimits), Key: "geo", PerSecond: rate}
}

// fetched is fetch's output.
type fetched struct {
	Digest  string           `json:"digest"`
	Records []records.Record `json:"records"`
}

type fetchStep struct{}

func (fetchStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	path := a.Params.String(ParamSource)
	digest, err := fileDigest(path)
	if err != nil {
		return nil, runner.Permanent(fmt.Errorf("reading the records file %s: %w", path, err))
	}
	recs, err := records.Read(path)
	if err != nil {
		return nil, runner.Permanent(err)
	}
	r, err := result(fetched{Digest: digest, Records: recs}, len(recs), fmt.Sprintf("enrich %d records", len(recs)))
	if err == nil {
		r.SourceFingerprint = digest // what upload checks after a break
	}
	return r, err
}

// checkSource names the records file when it is no longer what fetch read (fingerprint).
func checkSource(a *runner.Attempt, fingerprint string) ([]string, error) {
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

// result is a step's result with output out.
func result(out any, items int, next string) (*runner.Result, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &runner.Result{Output: b, Items: items, NextAction: next}, nil
}

// input decodes an earlier step's verified output into v.
func input(ctx context.Context, a *runner.Attempt, step string, v any) error {
	b, err := a.Input(ctx, step)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// apiStep is one of the three enrichment steps: it asks its API (api: the step's name and
// its answers' memo key prefix) for every fetched record in turn, each answer memoised,
// and outputs each record's enrichment by record id. The three run side by side, each
// on its own; validate puts their outputs together.
type apiStep[T any] struct {
	api   string
	c     Config
	do    func(ctx context.Context, id string) ([]byte, error) // one call for record id
	parse func([]byte) (T, error)
}

// enriched is an enrichment step's output: each record's enrichment, by record id.
type enriched[T any] map[string]T

func (s apiStep[T]) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var f fetched
	if err := input(ctx, a, Fetch, &f); err != nil {
		return nil, err
	}
	out := make(enriched[T], len(f.Records))
	for i, rec := range f.Records {
		if err := a.Fault(ctx, faults.BeforeWrite, i+1); err != nil {
			return nil, err
		}
		b, err := s.call(ctx, a, rec.ID)
		if err != nil {
			return nil, fmt.Errorf("the %s API for record %d (%s): %w", s.api, i+1, rec.ID, err)
		}
		v, err := s.parse(b)
		if err != nil {
			return nil, fmt.Errorf("the %s API's answer for record %d (%s): %w", s.api, i+1, rec.ID, err)
		}
		out[rec.ID] = v
		if err := a.Fault(ctx, faults.AfterWrite, i+1); err != nil {
			return nil, err
		}
	}
	return result(out, len(f.Records), fmt.Sprintf("validate %d records once profile, geo and risk are verified", len(f.Records)))
}

// call is the API's answer for record id: memoised under <run>.<api>.<id>, the call
// bounded by CallTimeout and retried in the attempt when it fails for a while (a timeout,
// a 429, a 5xx).
func (s apiStep[T]) call(ctx context.Context, a *runner.Attempt, id string) ([]byte, error) {
	var answer []byte
	err := a.Retry(ctx, func(int) error {
		b, err := a.Memo(ctx, s.api+"."+id, func(ctx context.Context) ([]byte, error) {
			cctx, cancel := context.WithTimeout(ctx, s.c.CallTimeout)
			defer cancel()
			b, err := s.do(cctx, id)
			if err != nil && records.IsTemporary(err) {
				return nil, runner.Temporary(err)
			}
			return b, err
		})
		answer = b
		return err
	})
	return answer, err
}

// Progress is what the step has made durable: its API's memoised answers. The loop guard
// counts attempts that add none, so a record that times out every time is handed over,
// while a slow night that advances is not.
func (s apiStep[T]) Progress(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
	n, err := a.Memoised(ctx, s.api+".") // its own keys, <api>.<record>
	if err != nil {
		return runner.Progress{}, err
	}
	return runner.Progress{Memoised: n, Where: "nats kv ls " + Space.Bucket(assets.BucketMemo) + " | grep '^" + a.RunID + "\\." + s.api + "\\.'"}, nil
}

// merge is the fetched records enriched with the three steps' outputs, in fetch's order.
func merge(f fetched, p enriched[records.Profile], g enriched[records.Geo], r enriched[records.Risk]) ([]records.Enriched, error) {
	out := make([]records.Enriched, len(f.Records))
	for i, rec := range f.Records {
		e := records.Enriched{Record: rec}
		var ok [3]bool
		e.Profile, ok[0] = p[rec.ID]
		e.Geo, ok[1] = g[rec.ID]
		e.Risk, ok[2] = r[rec.ID]
		for j, step := range []string{Profile, Geo, Risk} {
			if !ok[j] {
				return nil, runner.Permanent(fmt.Errorf("record %d (%s) has no answer in %s's output", i+1, rec.ID, step))
			}
		}
		out[i] = e
	}
	return out, nil
}

type validateStep struct{}

func (validateStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var (
		f fetched
		p enriched[records.Profile]
		g enriched[records.Geo]
		r enriched[records.Risk]
	)
	for _, in := range []struct {
		step string
		v    any
	}{{Fetch, &f}, {Profile, &p}, {Geo, &g}, {Risk, &r}} {
		if err := input(ctx, a, in.step, in.v); err != nil {
			return nil, err
		}
	}
	in, err := merge(f, p, g, r)
	if err != nil {
		return nil, err
	}
	valid := make([]records.Enriched, 0, len(in))
	var parked []kc.Parked
	for _, e := range in {
		if err := records.Validate(e); err != nil {
			parked = append(parked, kc.Parked{Item: e.Record.ID, Reason: err.Error()})
			continue
		}
		valid = append(valid, e)
	}
	res, err := result(valid, len(in), fmt.Sprintf("transform %d valid records (%d parked)", len(valid), len(parked)))
	if err == nil {
		res.Parked = parked
	}
	return res, err
}

type transformStep struct{}

func (transformStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var in []records.Enriched
	if err := input(ctx, a, Validate, &in); err != nil {
		return nil, err
	}
	out := make([]records.Upload, len(in))
	for i, e := range in {
		out[i] = records.Transform(e)
	}
	return result(out, len(out), fmt.Sprintf("upload %d records", len(out)))
}

type uploadStep struct {
	url    string
	client *httpidem.Client
}

// uploaded is upload's output: each record's receipt.
type uploaded struct {
	Receipts map[string]saga.Receipt `json:"receipts"`
}

// uploadKey is the idempotency key of record id's upload in run.
func uploadKey(run, id string) string { return run + ":upload:" + id }

// RaiseFences raises the upload system's fence of the run to the attempt's token before
// anything is written: a zombie's late upload with an older token is refused from now on.
func (s uploadStep) RaiseFences(ctx context.Context, a *runner.Attempt, t fence.Token) error {
	return raiseFence(ctx, s.url, a.RunID, t)
}

// raiseFence raises the upload system's fence of run to token t (POST /v1/fences).
func raiseFence(ctx context.Context, url, run string, t fence.Token) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/fences", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Cairn-Run", run)
	req.Header.Set("Cairn-Fence-Token", fmt.Sprint(t.Value))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return runner.Temporary(fmt.Errorf("raising the upload system's fence: %w", err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("raising the upload system's fence to %d: %w", t.Value, fence.ErrFenced)
	case resp.StatusCode >= 500:
		return runner.Temporary(fmt.Errorf("raising the upload system's fence: %s", resp.Status))
	case resp.StatusCode >= 300:
		return fmt.Errorf("raising the upload system's fence: %s", resp.Status)
	}
	return nil
}

// CheckSource: after a break, upload writes only while the records file is what fetch read.
func (uploadStep) CheckSource(ctx context.Context, a *runner.Attempt, fingerprint string) ([]string, error) {
	return checkSource(a, fingerprint)
}

// Plan is what upload will write, with no effect: each record's key, in order, so that a
// person can approve it before anything is sent (CAIRN_APPROVAL_STEPS=upload).
func (uploadStep) Plan(ctx context.Context, a *runner.Attempt) ([]byte, error) {
	var in []records.Upload
	if err := input(ctx, a, Transform, &in); err != nil {
		return nil, err
	}
	keys := make([]string, len(in))
	for i, u := range in {
		keys[i] = uploadKey(a.RunID, u.ID)
	}
	return json.Marshal(struct {
		Uploads []string `json:"uploads"`
	}{keys})
}

func (s uploadStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var in []records.Upload
	if err := input(ctx, a, Transform, &in); err != nil {
		return nil, err
	}
	bodies := make([][]byte, len(in))
	effs := make([]runner.Effect, len(in))
	for i, u := range in {
		b, err := json.Marshal(u)
		if err != nil {
			return nil, err
		}
		bodies[i] = b
		key := uploadKey(a.RunID, u.ID)
		rev, err := json.Marshal(reversal{ID: u.ID})
		if err != nil {
			return nil, err
		}
		effs[i] = runner.Effect{Key: key, Payload: u, Attrs: map[string]string{"record": u.ID},
			Reverse: &saga.Reverse{System: SystemUpload, Key: reversalKey(key), Payload: rev}}
	}
	out := uploaded{Receipts: make(map[string]saga.Receipt, len(in))}
	err := a.Keyed(ctx, effs, func(ctx context.Context, i int) (*saga.Receipt, error) {
		rc, err := s.client.Write(ctx, httpidem.Request{URL: s.url + "/v1/uploads", Key: effs[i].Key, Run: a.RunID, Token: a.Token.Value,
			Body: bodies[i], Header: http.Header{"Content-Type": {"application/json"}}})
		if err != nil {
			return nil, err
		}
		r := saga.Receipt{Status: rc.Status, Reference: rc.Reference, AnswerDigest: rc.AnswerDigest, Replayed: rc.Replayed}
		out.Receipts[in[i].ID] = r
		return &r, nil
	})
	if err != nil {
		return nil, err
	}
	return result(out, len(in), "")
}

// Verify checks every record was uploaded: one receipt each, a 2xx.
func (uploadStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var in []records.Upload
	if err := input(ctx, a, Transform, &in); err != nil {
		return err
	}
	var out uploaded
	if err := json.NewDecoder(bytes.NewReader(r.Output)).Decode(&out); err != nil {
		return err
	}
	for _, u := range in {
		rc, ok := out.Receipts[u.ID]
		if !ok || rc.Status/100 != 2 {
			return fmt.Errorf("record %s: no successful upload (receipt %+v)", u.ID, rc)
		}
	}
	if len(out.Receipts) != len(in) {
		return fmt.Errorf("%d receipts for %d records", len(out.Receipts), len(in))
	}
	return nil
}
