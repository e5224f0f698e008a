package undo

import (
	"context"
	"errors"
	"net/http"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/httpidem"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// HTTP reverses the keyed writes a step made to an outside system over HTTP (pkg/httpidem)
// by writes of the system's own: the reversal of an effect is a POST of its intent's reverse
// payload (saga.Reverse.Payload), under the reverse key (saga.Reverse.Key), to URL(effect),
// through Client: keyed as the write was, fenced by the undo's token, so it is made once
// however often the undo repeats it. It is the undo.System of such a system
// (app.Config.Systems).
type HTTP struct {
	Client *httpidem.Client
	// URL is where the reversal of e is posted.
	URL func(e saga.Effect) string
	// Fence, when set, is where the system's fence of a run is raised (Client.RaiseFence)
	// when an undo starts, so that a step's writer of an older token is refused from then on.
	Fence string
	// NotLanded, when set, tells a refusal that means the write never landed (nothing to
	// reverse: made is false, no error), such as a 404 of the system's own problem type.
	NotLanded func(*httpidem.Error) bool
}

// RaiseFence raises the system's fence of the run to t (none without Fence).
func (h HTTP) RaiseFence(ctx context.Context, t fence.Token, rec *kc.Record) error {
	if h.Fence == "" {
		return nil
	}
	return h.Client.RaiseFence(ctx, h.Fence, t)
}

// Reverse posts the reversal of e. made is true for a reversal the system answers 201
// Created to, new; false for one it had made already (its stored answer replayed, or a 200
// for one under another key) and for a write that never landed (NotLanded). A temporary
// failure or a fenced answer is the client's classed error; a refusal no retry changes
// (httpidem.ErrRejected) is marked runner.Permanent, which hands the run over naming it.
func (h HTTP) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	rv := e.Intent.Reverse
	if rv == nil {
		return false, runner.Permanent(errors.New("the effect " + e.Intent.Key + " names no reversal"))
	}
	rc, err := h.Client.Write(ctx, httpidem.Request{URL: h.URL(e), Key: rv.Key, Run: rec.RunID, Token: t.Value,
		Body: rv.Payload, Header: http.Header{"Content-Type": {"application/json"}}})
	var he *httpidem.Error
	if errors.As(err, &he) && h.NotLanded != nil && h.NotLanded(he) {
		return false, nil
	}
	if errors.Is(err, httpidem.ErrRejected) {
		return false, runner.Permanent(err)
	}
	if err != nil {
		return false, err
	}
	return rc.Status == http.StatusCreated && !rc.Replayed, nil
}
