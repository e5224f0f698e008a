package enrich

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/undo"
)

// SystemUpload is the system the upload step's effects name (saga.Reverse.System): the
// upload system, which an undo reverses (uploadUndo).
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

// uploadUndo reverses the uploads at c.UploadURL: a reversal is POST
// /v1/uploads/<key>/reversal, keyed <key>:rev and fenced by the undo's token; an upload that
// never landed is a 404 of the problem type …#not-uploaded (nothing to reverse).
func uploadUndo(c Config, client *httpidem.Client) undo.HTTP {
	return undo.HTTP{Client: client, Fence: c.UploadURL + "/v1/fences",
		URL: func(e saga.Effect) string { return reversalURL(c.UploadURL, e.Intent.Key) },
		NotLanded: func(e *httpidem.Error) bool {
			return e.Status == http.StatusNotFound && e.Problem != nil && strings.HasSuffix(e.Problem.Type, "#not-uploaded")
		}}
}
