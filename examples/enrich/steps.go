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
	"golang.org/x/sync/errgroup"

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
		Fetch:     fetchStep{},
		Enrich:    enrichStep{c: c, geo: geo},
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

type enrichStep struct {
	c   Config
	geo *ratelimit.Limiter
}

// The APIs, as their answers' memo keys name them.
const (
	apiProfile = "profile"
	apiGeo     = "geo"
	apiRisk    = "risk"
)

func (s enrichStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var f fetched
	if err := input(ctx, a, Fetch, &f); err != nil {
		return nil, err
	}
	out := make([]records.Enriched, len(f.Records))
	for i, rec := range f.Records {
		if err := a.Fault(ctx, faults.BeforeWrite, i+1); err != nil {
			return nil, err
		}
		e := records.Enriched{Record: rec}
		// The three calls side by side; each answer memoised as it comes.
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error {
			b, err := s.call(gctx, a, apiProfile, rec.ID, func(ctx context.Context) ([]byte, error) {
				_, b, err := s.c.APIs.Profile(ctx, rec.ID)
				return b, err
			})
			if err == nil {
				e.Profile, err = records.ParseProfile(b)
			}
			return err
		})
		g.Go(func() error {
			b, err := s.call(gctx, a, apiGeo, rec.ID, func(ctx context.Context) ([]byte, error) {
				if _, err := s.geo.Wait(ctx); err != nil {
					return nil, runner.Temporary(err)
				}
				_, b, err := s.c.APIs.Geo(ctx, rec.ID)
				var tooMany *records.TooManyError
				if errors.As(err, &tooMany) {
					_ = s.geo.Hold(ctx, tooMany.RetryAfter) // every instance waits it out
				}
				return b, err
			})
			if err == nil {
				e.Geo, err = records.ParseGeo(b)
			}
			return err
		})
		g.Go(func() error {
			b, err := s.call(gctx, a, apiRisk, rec.ID, func(ctx context.Context) ([]byte, error) {
				_, b, err := s.c.APIs.Risk(ctx, rec.ID)
				return b, err
			})
			if err == nil {
				e.Risk, err = records.ParseRisk(b)
			}
			return err
		})
		if err := g.Wait(); err != nil {
			return nil, fmt.Errorf("enriching record %d (%s): %w", i+1, rec.ID, err)
		}
		out[i] = e
		if err := a.Fault(ctx, faults.AfterWrite, i+1); err != nil {
			return nil, err
		}
	}
	return result(out, len(out), fmt.Sprintf("validate %d records", len(out)))
}

// call is one API's answer for a record: memoised, the call bounded by CallTimeout and
// retried in the attempt when it fails for a while (a timeout, a 429, a 5xx).
func (s enrichStep) call(ctx context.Context, a *runner.Attempt, api, id string, do func(context.Context) ([]byte, error)) ([]byte, error) {
	var answer []byte
	err := a.Retry(ctx, func(int) error {
		b, err := a.Memo(ctx, api+"."+id, func(ctx context.Context) ([]byte, error) {
			cctx, cancel := context.WithTimeout(ctx, s.c.CallTimeout)
			defer cancel()
			b, err := do(cctx)
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

// Progress is what enrich has made durable: its memoised answers. The loop guard counts
// attempts that add none, so a record that times out every time is handed over, while a
// slow night that advances is not.
func (enrichStep) Progress(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
	n, err := a.Memoised(ctx, "")
	if err != nil {
		return runner.Progress{}, err
	}
	return runner.Progress{Memoised: n, Where: "nats kv ls " + Space.Bucket(assets.BucketMemo) + " | grep '^" + a.RunID + "\\.'"}, nil
}

type validateStep struct{}

func (validateStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var in []records.Enriched
	if err := input(ctx, a, Enrich, &in); err != nil {
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
	r, err := result(valid, len(in), fmt.Sprintf("transform %d valid records (%d parked)", len(valid), len(parked)))
	if err == nil {
		r.Parked = parked
	}
	return r, err
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/fences", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Cairn-Run", a.RunID)
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
		effs[i] = runner.Effect{Key: uploadKey(a.RunID, u.ID), Payload: u, Attrs: map[string]string{"record": u.ID}}
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
