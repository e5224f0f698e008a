package httpidem

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/retry"
)

// RaiseFence raises the outside system's fence of t's run to t: a POST to url with the
// run's fence headers and no body, signed when the client signs. From then on the system
// refuses a write of an older token (a zombie's). A step calls it when it takes the lease
// (runner.Typed.RaiseFences, runner.Fencer), an undo when it starts. 409 is fence.ErrFenced:
// a newer token of the run was heard first; a 5xx, a 429 or a failed call is temporary;
// any other answer but a 2xx is an error naming it.
func (c *Client) RaiseFence(ctx context.Context, url string, t fence.Token) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, http.NoBody)
	if err != nil {
		return err
	}
	req.Header.Set(c.cfg.RunHeader, t.RunID)
	req.Header.Set(c.cfg.TokenHeader, strconv.FormatUint(t.Value, 10))
	if c.cfg.Signer != nil {
		Sign(req, nil, c.cfg.Signer, c.cfg.Now(), c.cfg.Headers...)
	}
	what := fmt.Sprintf("raising the fence of %s at %s to %d", t.RunID, url, t.Value)
	resp, err := c.http.Do(req)
	if err != nil {
		return retry.Temporary(fmt.Errorf("%s: %w", what, err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHead))
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return nil
	case s == http.StatusConflict:
		return fmt.Errorf("%s: %w", what, fence.ErrFenced)
	case s >= 500 || s == http.StatusTooManyRequests:
		return retry.Temporary(fmt.Errorf("%s: %s", what, resp.Status))
	}
	return fmt.Errorf("%s: %s", what, resp.Status)
}
