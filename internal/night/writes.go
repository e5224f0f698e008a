package night

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// effect is one outside write of a step, as its saga records describe it.
type effect struct {
	key      string
	supplier string
	payload  any
	digest   string        // what the key stands for, compared with an earlier attempt's; "" when the outside system compares
	reverse  *saga.Reverse // nil for a write that is itself a reversal
}

// keyed walks a step's writes in ascending key order, firing the write faults around each.
// Every write's intent is on CAIRN_SAGA before it is made, and its outcome after. A write
// whose key an earlier attempt meant to write with another digest is refused before it is
// made (idempotency.ErrConflict, naming both digests): the run is handed over.
func keyed(ctx context.Context, a *runner.Attempt, effs []effect, write func(i int) error) error {
	return keyedReceipts(ctx, a, effs, func(i int) (*saga.Receipt, error) { return nil, write(i) })
}

// receiptPoster is a book whose writes leave a receipt (the ledger over HTTP).
type receiptPoster interface {
	PostReceipt(ctx context.Context, t fence.Token, e books.Entry) (bool, saga.Receipt, error)
}

// keyedReceipts is keyed for writes that may leave a receipt (an HTTP answer's status,
// reference and digest): a write's outcome record carries the receipt of its last try.
func keyedReceipts(ctx context.Context, a *runner.Attempt, effs []effect, write func(i int) (*saga.Receipt, error)) error {
	var prior saga.Intents
	if slices.ContainsFunc(effs, func(e effect) bool { return e.digest != "" }) {
		var err error
		if prior, err = a.Intents(ctx); err != nil {
			return err
		}
	}
	for i, e := range effs {
		n := i + 1
		if err := a.Fault(ctx, faults.BeforeWrite, n); err != nil {
			return err
		}
		intent := sagaRecord(a, e, saga.Intent)
		if err := prior.Refuses(intent); err != nil {
			return fmt.Errorf("writing %s: %w", e.key, err)
		}
		if err := a.RecordEffect(ctx, intent); err != nil {
			return runner.Temporary(err)
		}
		var receipt *saga.Receipt
		err := a.Retry(ctx, func(try int) error {
			rc, err := write(i)
			if err != nil {
				return err
			}
			receipt = rc
			return a.Fault(ctx, faults.LostReply, n)
		})
		if err != nil {
			return fmt.Errorf("writing %s: %w", e.key, err)
		}
		outcome := sagaRecord(a, e, saga.Outcome)
		if receipt != nil {
			if outcome, err = saga.WithReceipt(intent, *receipt); err != nil {
				return err
			}
		}
		if err := a.RecordEffect(ctx, outcome); err != nil {
			return runner.Temporary(err)
		}
		if err := a.Fault(ctx, faults.AfterWrite, n); err != nil {
			return err
		}
	}
	return nil
}

func sagaRecord(a *runner.Attempt, e effect, phase string) saga.Record {
	r := saga.Record{Key: e.key, RunID: a.RunID, Step: a.Step, Generation: a.Generation, Token: a.Token.Value,
		Phase: phase, Reverse: e.reverse}
	if e.supplier != "" {
		r.Attrs = map[string]string{AttrSupplier: e.supplier}
	}
	if phase == saga.Intent {
		r.Payload, _ = json.Marshal(e.payload)
		r.Digest = e.digest
	} else {
		r.Outcome = "done"
		r.Reverse = nil
	}
	return r
}

// reverseWith is how to reverse a row: write rev (its reversal) in system.
func reverseWith(system string, rev any, key string) *saga.Reverse {
	b, _ := json.Marshal(rev)
	return &saga.Reverse{System: system, Key: key, Payload: b}
}

func ledgerEffects(es []books.Entry) []effect {
	out := make([]effect, len(es))
	for i, e := range es {
		out[i] = effect{key: e.Key, supplier: e.SupplierID, payload: e}
		if e.Reverses == "" {
			rev := ledgerOps.reversal(e)
			out[i].reverse = reverseWith(SystemLedger, rev, rev.Key)
		}
	}
	return out
}

func stockEffects(as []books.Adjustment) []effect {
	out := make([]effect, len(as))
	for i, x := range as {
		out[i] = effect{key: x.Key, supplier: x.SupplierID, payload: x}
		if x.Reverses == "" {
			rev := stockOps.reversal(x)
			out[i].reverse = reverseWith(SystemStock, rev, rev.Key)
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
	return s.e.LedgerBook(a.Params.Shadow).RaiseFence(ctx, t)
}

func (s postLedgerStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	p, writes, err := s.plan(ctx, a)
	if err != nil {
		return nil, err
	}
	l := s.e.LedgerBook(a.Params.Shadow)
	if err := keyedReceipts(ctx, a, ledgerEffects(writes), func(i int) (*saga.Receipt, error) {
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
	l := s.e.LedgerBook(a.Params.Shadow)
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
	l := s.e.LedgerBook(a.Params.Shadow)
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
