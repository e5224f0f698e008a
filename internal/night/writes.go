package night

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// keyed makes a step's writes through a.Keyed, for writes that leave no receipt.
func keyed(ctx context.Context, a *runner.Attempt, effs []runner.Effect, write func(i int) error) error {
	return a.Keyed(ctx, effs, func(_ context.Context, i int) (*saga.Receipt, error) { return nil, write(i) })
}

// receiptPoster is a book whose writes leave a receipt (the ledger over HTTP).
type receiptPoster interface {
	PostReceipt(ctx context.Context, t fence.Token, e books.Entry) (bool, saga.Receipt, error)
}

// supplierAttrs are the attributes of an effect of supplier's (none without one).
func supplierAttrs(supplier string) map[string]string {
	if supplier == "" {
		return nil
	}
	return map[string]string{AttrSupplier: supplier}
}

// reverseWith is how to reverse a row: write rev (its reversal) in system.
func reverseWith(system string, rev any, key string) *saga.Reverse {
	b, _ := json.Marshal(rev)
	return &saga.Reverse{System: system, Key: key, Payload: b}
}

func ledgerEffects(es []books.Entry) []runner.Effect {
	out := make([]runner.Effect, len(es))
	for i, e := range es {
		out[i] = runner.Effect{Key: e.Key, Attrs: supplierAttrs(e.SupplierID), Payload: e}
		if e.Reverses == "" {
			rev := ledgerOps.reversal(e)
			out[i].Reverse = reverseWith(SystemLedger, rev, rev.Key)
		}
	}
	return out
}

func stockEffects(as []books.Adjustment) []runner.Effect {
	out := make([]runner.Effect, len(as))
	for i, x := range as {
		out[i] = runner.Effect{Key: x.Key, Attrs: supplierAttrs(x.SupplierID), Payload: x}
		if x.Reverses == "" {
			rev := stockOps.reversal(x)
			out[i].Reverse = reverseWith(SystemStock, rev, rev.Key)
		}
	}
	return out
}

func adjustments(ctx context.Context, a *runner.Attempt) ([]recon.Adjustment, error) {
	var c compareOutput
	if err := input(ctx, a, Compare, &c); err != nil {
		return nil, err
	}
	return c.Adjustments, nil
}

// result is a writing step's result: its output (what it wrote, so that Verify checks the
// outside system against it without reading the inputs again) and its effects.
func result(ctx context.Context, a *runner.Attempt, out any, keys int, next string) (*runner.Result, error) {
	b, err := output(ctx, a, out)
	if err != nil {
		return nil, err
	}
	return &runner.Result{Output: b, Effects: &kc.Effects{Keys: keys}, Items: keys, NextAction: next}, nil
}

// ledgerOutput is what post-ledger wrote: the entries that stand for the night's
// adjustments, and (in a rerun) the reversals of earlier generations' entries.
type ledgerOutput struct {
	Entries   []books.Entry `json:"entries"`
	Reversals []books.Entry `json:"reversals,omitempty"`
}

type postLedgerStep struct{ e *Env }

func (s postLedgerStep) CheckSource(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
	return sourceCheck(s).CheckSource(ctx, a, fp)
}

func (s postLedgerStep) RaiseFences(ctx context.Context, a *runner.Attempt, t fence.Token) error {
	return s.e.LedgerBook(PostLedger, a.Params.Shadow).RaiseFence(ctx, t)
}

func (s postLedgerStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	p, writes, err := s.plan(ctx, a)
	if err != nil {
		return nil, err
	}
	l := s.e.LedgerBook(PostLedger, a.Params.Shadow)
	if err := a.Keyed(ctx, ledgerEffects(writes), func(ctx context.Context, i int) (*saga.Receipt, error) {
		if rp, ok := l.(receiptPoster); ok {
			_, rc, err := rp.PostReceipt(ctx, a.Token, writes[i])
			return &rc, err
		}
		_, err := l.Post(ctx, a.Token, writes[i])
		return nil, err
	}); err != nil {
		return nil, err
	}
	return result(ctx, a, ledgerOutput{Entries: p.stand, Reversals: p.reverse}, len(writes), fmt.Sprintf("apply %d stock adjustments for %s", len(p.stand), a.RunID))
}

// plan is what post-ledger writes, in order: the reversals of rows no longer standing, then
// the new rows.
func (s postLedgerStep) plan(ctx context.Context, a *runner.Attempt) (rowPlan[books.Entry], []books.Entry, error) {
	adjs, err := adjustments(ctx, a)
	if err != nil {
		return rowPlan[books.Entry]{}, nil, err
	}
	es := make([]books.Entry, len(adjs))
	keys := make([]string, len(adjs))
	for i, x := range adjs {
		es[i] = books.Entry{Key: a.RunID + ":" + x.KeySuffix(), RunID: a.RunID, InvoiceNo: x.InvoiceNo, Line: x.Line,
			Kind: x.Kind, SupplierID: x.SupplierID, AmountPaise: x.AmountPaise, CreatedAt: stamp(a)}
		keys[i] = es[i].Key
	}
	l := s.e.LedgerBook(PostLedger, a.Params.Shadow)
	var existing []books.Entry
	if a.Generation > 0 {
		if existing, err = l.ListRun(ctx, a.RunID); err != nil {
			return rowPlan[books.Entry]{}, nil, runner.Temporary(err)
		}
	}
	p := planRows(a.Generation, es, existing, ledgerOps)
	for i := range p.reverse {
		p.reverse[i].CreatedAt = stamp(a)
	}
	return p, append(slices.Clip(p.reverse), p.write...), nil
}

// Verify reads back every key and amount.
func (s postLedgerStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var out ledgerOutput
	if err := unmarshal(ctx, a, r.Output, &out); err != nil {
		return err
	}
	l := s.e.LedgerBook(PostLedger, a.Params.Shadow)
	for _, want := range append(out.Entries, out.Reversals...) {
		got, ok, err := l.Get(ctx, want.Key)
		if err != nil {
			return runner.Temporary(err)
		}
		if !ok || got.AmountPaise != want.AmountPaise || got.SupplierID != want.SupplierID || got.Reverses != want.Reverses {
			return fmt.Errorf("ledger entry %s: want %d paise for %s, found %+v (present %t)", want.Key, want.AmountPaise, want.SupplierID, got, ok)
		}
	}
	return nil
}

// stockOutput is what update-stock wrote, as ledgerOutput.
type stockOutput struct {
	Adjustments []books.Adjustment `json:"adjustments"`
	Reversals   []books.Adjustment `json:"reversals,omitempty"`
}

type updateStockStep struct{ e *Env }

func (s updateStockStep) CheckSource(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
	return sourceCheck(s).CheckSource(ctx, a, fp)
}

func (s updateStockStep) RaiseFences(ctx context.Context, a *runner.Attempt, t fence.Token) error {
	return s.e.ERP.Stock(a.Params.Shadow).RaiseFence(ctx, t)
}

func (s updateStockStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	p, writes, err := s.plan(ctx, a)
	if err != nil {
		return nil, err
	}
	st := s.e.ERP.Stock(a.Params.Shadow)
	if err := keyed(ctx, a, stockEffects(writes), func(i int) error {
		_, err := st.Apply(ctx, a.Token, writes[i])
		return err
	}); err != nil {
		return nil, err
	}
	return result(ctx, a, stockOutput{Adjustments: p.stand, Reversals: p.reverse}, len(writes), "send the debit notes of "+a.RunID)
}

// plan is what update-stock writes, in order, as postLedgerStep.plan.
func (s updateStockStep) plan(ctx context.Context, a *runner.Attempt) (rowPlan[books.Adjustment], []books.Adjustment, error) {
	adjs, err := adjustments(ctx, a)
	if err != nil {
		return rowPlan[books.Adjustment]{}, nil, err
	}
	as := make([]books.Adjustment, len(adjs))
	keys := make([]string, len(adjs))
	for i, x := range adjs {
		as[i] = books.Adjustment{Key: a.RunID + ":stock:" + x.KeySuffix(), RunID: a.RunID, Warehouse: WarehouseOf(a.Params),
			SKU: x.SKU, SupplierID: x.SupplierID, QtyDelta: x.QtyDelta, ValueDeltaPaise: x.ValueDeltaPaise,
			Reason: fmt.Sprintf("%s mismatch on %s line %d", x.Kind, x.InvoiceNo, x.Line), CreatedAt: stamp(a)}
		keys[i] = as[i].Key
	}
	st := s.e.ERP.Stock(a.Params.Shadow)
	var existing []books.Adjustment
	if a.Generation > 0 {
		if existing, err = st.ListRun(ctx, a.RunID); err != nil {
			return rowPlan[books.Adjustment]{}, nil, runner.Temporary(err)
		}
	}
	p := planRows(a.Generation, as, existing, stockOps)
	for i := range p.reverse {
		p.reverse[i].CreatedAt = stamp(a)
	}
	return p, append(slices.Clip(p.reverse), p.write...), nil
}

// Verify reads back every adjustment.
func (s updateStockStep) Verify(ctx context.Context, a *runner.Attempt, r *runner.Result) error {
	var out stockOutput
	if err := unmarshal(ctx, a, r.Output, &out); err != nil {
		return err
	}
	st := s.e.ERP.Stock(a.Params.Shadow)
	for _, want := range append(out.Adjustments, out.Reversals...) {
		got, ok, err := st.Get(ctx, want.Key)
		if err != nil {
			return runner.Temporary(err)
		}
		if !ok || got.QtyDelta != want.QtyDelta || got.ValueDeltaPaise != want.ValueDeltaPaise {
			return fmt.Errorf("stock adjustment %s: want %d/%d, found %+v (present %t)", want.Key, want.QtyDelta, want.ValueDeltaPaise, got, ok)
		}
	}
	return nil
}
