package undo

import (
	"context"

	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/sqlidem"
)

// SQL reverses the rows a step wrote to a table of the job's own (pkg/sqlidem) under its
// effects' keys: the reversal of an effect removes the row of its key (sqlidem.Store.Remove),
// fenced by the undo's token, which the table's fence holds from then on. It is the
// undo.System of such a table (app.Config.Systems).
type SQL struct {
	Store *sqlidem.Store
}

// RaiseFence raises the table's fence of the run to t.
func (s SQL) RaiseFence(ctx context.Context, t fence.Token, rec *kc.Record) error {
	return s.Store.RaiseFence(ctx, t)
}

// Reverse removes the row of e's key: made is false when there was none (the write never
// landed, or it was removed already).
func (s SQL) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	return s.Store.Remove(ctx, t, e.Intent.Key)
}
