package enrich

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/undo"
)

// SystemUpload is the system the upload step's effects name (saga.Reverse.System): the
// upload system, which UploadSystem reverses.
const SystemUpload = "upload"

// reversal is the body of a reversal: the record the upload holds, which the upload
// system checks against the upload of the key.
type reversal struct {
	ID string `json:"id"`
}

// reversalKey is the idempotency key of the reversal of the upload made under key.
func reversalKey(key string) string { return key + ":rev" }

// reversalURL is the upload system's reversal of the upload made under key.
func reversalURL(base, key string) string {
	return base + "/v1/uploads/" + url.PathEscape(key) + "/reversal"
}

// Systems are the job's outside systems an undo reverses, by the name its effects carry
// (app.Config.Systems): the upload system at c.UploadURL.
func Systems(c Config) (map[string]undo.System, error) {
	cl, err := httpidem.NewClient(httpidem.ClientConfig{CallTimeout: cmp.Or(c.CallTimeout, 2*time.Second)})
	if err != nil {
		return nil, err
	}
	return map[string]undo.System{SystemUpload: UploadSystem{URL: c.UploadURL, Client: cl}}, nil
}

// UploadSystem reverses the upload step's uploads: the fence is the one the step raises
// (POST /v1/fences), a reversal is POST /v1/uploads/<key>/reversal, keyed <key>:rev and
// fenced by the undo's token through pkg/httpidem's client, as the step uploads.
type UploadSystem struct {
	URL    string // the upload system's base URL
	Client *httpidem.Client
}

// RaiseFence raises the run's fence in the upload system to the undo's token: an upload
// of an older token (a zombie step) is refused from now on.
func (s UploadSystem) RaiseFence(ctx context.Context, t fence.Token, rec *kc.Record) error {
	return s.Client.RaiseFence(ctx, s.URL+"/v1/fences", t)
}

// Reverse reverses the upload of e. made is false for a reversal the upload system had
// made already (its stored answer replayed, or one under another key), and for an upload
// that never landed (404, problem type …#not-uploaded: nothing to reverse; any other 404 is
// an error). A temporary failure or a fenced answer is the client's classed error
// (httpidem.Error); a refused one is marked runner.Permanent, which hands the run over.
func (s UploadSystem) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	rv := e.Intent.Reverse
	rc, err := s.Client.Write(ctx, httpidem.Request{URL: reversalURL(s.URL, e.Intent.Key), Key: rv.Key, Run: rec.RunID, Token: t.Value,
		Body: rv.Payload, Header: http.Header{"Content-Type": {"application/json"}}})
	var he *httpidem.Error
	if errors.As(err, &he) && he.Status == http.StatusNotFound && he.Problem != nil && strings.HasSuffix(he.Problem.Type, "#not-uploaded") {
		return false, nil
	}
	if errors.Is(err, httpidem.ErrRejected) {
		// A refusal no retry changes (another record under the key, a bad body): the
		// undo hands the run over, naming the upload.
		return false, runner.Permanent(err)
	}
	if err != nil {
		return false, err
	}
	return rc.Status == http.StatusCreated && !rc.Replayed, nil
}
