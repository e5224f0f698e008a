package enrich

import (
	"cmp"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/undo"
)

// SystemUpload is the system the upload step's effects name (saga.Reverse.System): the
// upload system, which Systems reverses.
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
// (app.Config.Systems): the upload system at c.UploadURL, whose reversal of an upload is POST
// /v1/uploads/<key>/reversal, keyed <key>:rev and fenced by the undo's token (undo.HTTP); an
// upload that never landed is a 404 of its problem type …#not-uploaded (nothing to reverse).
func Systems(c Config) (map[string]undo.System, error) {
	cl, err := httpidem.NewClient(httpidem.ClientConfig{CallTimeout: cmp.Or(c.CallTimeout, 2*time.Second)})
	if err != nil {
		return nil, err
	}
	return map[string]undo.System{SystemUpload: undo.HTTP{Client: cl, Fence: c.UploadURL + "/v1/fences",
		URL: func(e saga.Effect) string { return reversalURL(c.UploadURL, e.Intent.Key) },
		NotLanded: func(e *httpidem.Error) bool {
			return e.Status == http.StatusNotFound && e.Problem != nil && strings.HasSuffix(e.Problem.Type, "#not-uploaded")
		}}}, nil
}
