package enrich

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/cairnhq/cairn/examples/enrich/records"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// uploader uploads each record to the upload system at url, keyed and fenced.
type uploader struct {
	url    string
	client *httpidem.Client
}

// uploaded is upload's output: each record's receipt.
type uploaded struct {
	Receipts map[string]saga.Receipt `json:"receipts"`
}

// uploadKey is the idempotency key of record id's upload in run.
func uploadKey(run, id string) string { return run + ":upload:" + id }

// plan is what upload will write, with no effect: each record's key, in order, so that a
// person can approve it before anything is sent (CAIRN_APPROVAL_STEPS=upload).
func (uploader) plan(ctx context.Context, a *runner.Attempt, in []records.Upload) (any, error) {
	keys := make([]string, len(in))
	for i, u := range in {
		keys[i] = uploadKey(a.RunID, u.ID)
	}
	return struct {
		Uploads []string `json:"uploads"`
	}{keys}, nil
}

func (u uploader) run(ctx context.Context, a *runner.Attempt, in []records.Upload) (uploaded, error) {
	bodies := make([][]byte, len(in))
	effs := make([]runner.Effect, len(in))
	for i, up := range in {
		b, err := json.Marshal(up)
		if err != nil {
			return uploaded{}, err
		}
		rev, err := json.Marshal(reversal{ID: up.ID})
		if err != nil {
			return uploaded{}, err
		}
		key := uploadKey(a.RunID, up.ID)
		bodies[i] = b
		effs[i] = runner.Effect{Key: key, Payload: up, Attrs: map[string]string{"record": up.ID},
			Reverse: &saga.Reverse{System: SystemUpload, Key: reversalKey(key), Payload: rev}}
	}
	out := uploaded{Receipts: make(map[string]saga.Receipt, len(in))}
	err := a.Keyed(ctx, effs, func(ctx context.Context, i int) (*saga.Receipt, error) {
		rc, err := u.client.Write(ctx, httpidem.Request{URL: u.url + "/v1/uploads", Key: effs[i].Key, Run: a.RunID, Token: a.Token.Value,
			Body: bodies[i], Header: http.Header{"Content-Type": {"application/json"}}})
		if err != nil {
			return nil, err
		}
		r := saga.Receipt{Status: rc.Status, Reference: rc.Reference, AnswerDigest: rc.AnswerDigest, Replayed: rc.Replayed}
		out.Receipts[in[i].ID] = r
		return &r, nil
	})
	a.Count(len(in))
	return out, err
}

// verify checks every record was uploaded: one receipt each, a 2xx.
func (uploader) verify(ctx context.Context, a *runner.Attempt, in []records.Upload, out uploaded) error {
	for _, u := range in {
		if rc, ok := out.Receipts[u.ID]; !ok || rc.Status/100 != 2 {
			return fmt.Errorf("record %s: no successful upload (receipt %+v)", u.ID, rc)
		}
	}
	if len(out.Receipts) != len(in) {
		return fmt.Errorf("%d receipts for %d records", len(out.Receipts), len(in))
	}
	return nil
}
