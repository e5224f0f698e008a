package night

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/internal/recon"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// matchOutput pairs invoice lines with purchase-order lines. Run writes it one line at a
// time, and compare reads it so.
type matchOutput struct {
	Matches   []recon.Match     `json:"matches"`
	Unmatched []recon.Unmatched `json:"unmatched"`
}

type matchStep struct{ e *Env }

// Run reads extract's invoices twice, one at a time: for their purchase-order references,
// then to match them, each straight into the output.
func (s matchStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	seen := map[string]bool{}
	var refs []string
	if err := readFields(ctx, a, Extract, fields{"invoices": each(func(inv recon.Invoice) error {
		if !seen[inv.PORef] {
			seen[inv.PORef] = true
			refs = append(refs, inv.PORef)
		}
		return nil
	})}); err != nil {
		return nil, err
	}
	slices.Sort(refs)
	pos, err := recon.LoadPurchaseOrders(ctx, s.e.erp(), refs)
	if err != nil {
		return nil, runner.Temporary(fmt.Errorf("reading purchase orders: %w", err))
	}
	m := recon.NewMatcher(pos)
	d := newDoc(ctx, a)
	d.list("matches")
	matched, un := 0, []recon.Unmatched{}
	var ms []recon.Match
	if err := readFields(ctx, a, Extract, fields{"invoices": each(func(inv recon.Invoice) error {
		ms, un = m.Lines(inv, ms[:0], un)
		for _, x := range ms {
			d.item(x)
		}
		matched += len(ms)
		return nil
	})}); err != nil {
		return nil, err
	}
	d.endList()
	d.field("unmatched", un)
	b, err := d.done()
	if err != nil {
		return nil, err
	}
	var parked []kc.Parked
	for _, u := range un {
		parked = append(parked, kc.Parked{Item: fmt.Sprintf("%s:%d", u.InvoiceNo, u.Line), Reason: u.Reason})
	}
	return &runner.Result{Output: b, Parked: parked, Items: matched + len(un),
		NextAction: fmt.Sprintf("compare %d matched lines with the stock received", matched)}, nil
}

// compareOutput is the adjustments the night must make.
type compareOutput struct {
	Adjustments []recon.Adjustment `json:"adjustments"`
}

// snapshot is what compare read of the stock, once.
type snapshot struct {
	Receipts []recon.Receipt    `json:"receipts"`
	Levels   []recon.StockLevel `json:"levels"`
}

type compareStep struct{ e *Env }

func (s compareStep) CheckSource(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
	return sourceCheck(s).CheckSource(ctx, a, fp)
}

// Run sets match's lines against the receipts one at a time, as it reads them.
func (s compareStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	// A rerun keeps the snapshot (and the shadow levels) of the night's first compare: the
	// stock has moved since, by this run's own adjustments. It sets the matches against the
	// snapshot's receipts, as Verify does: the stock is read once a night.
	first := a.Generation == 0 || a.Record().Snapshot == nil
	var rc []recon.Receipt
	if first {
		var err error
		if rc, err = recon.LoadReceipts(ctx, s.e.erp(), WarehouseOf(a.Params), DateOf(a.Params)); err != nil {
			return nil, runner.Temporary(fmt.Errorf("reading stock received: %w", err))
		}
	} else {
		var saved snapshot
		if err := savedSnapshot(ctx, a, nil, &saved); err != nil {
			return nil, err
		}
		rc = saved.Receipts
	}
	c := recon.NewComparer(rc)
	skus := map[string]bool{}
	var list []string
	matches := 0
	if err := readFields(ctx, a, Match, fields{"matches": each(func(x recon.Match) error {
		if !skus[x.SKU] {
			skus[x.SKU] = true
			list = append(list, x.SKU)
		}
		c.Add(x)
		matches++
		return nil
	})}); err != nil {
		return nil, err
	}
	var snap []byte
	if first {
		levels, err := recon.LoadStockLevels(ctx, s.e.erp(), WarehouseOf(a.Params), list)
		if err != nil {
			return nil, runner.Temporary(fmt.Errorf("reading stock levels: %w", err))
		}
		if a.Params.Shadow {
			if err := s.e.ERP.Stock(true).CopyLevelsToShadow(ctx, WarehouseOf(a.Params), list); err != nil {
				return nil, runner.Temporary(err)
			}
		}
		if snap, err = output(ctx, a, snapshot{Receipts: rc, Levels: levels}); err != nil {
			return nil, err
		}
	}
	adjs := c.Adjustments()
	b, err := output(ctx, a, compareOutput{Adjustments: adjs})
	if err != nil {
		return nil, err
	}
	return &runner.Result{Output: b, Snapshot: snap, Items: matches,
		NextAction: fmt.Sprintf("post %d ledger adjustments for %s, then update stock", len(adjs), a.RunID)}, nil
}
