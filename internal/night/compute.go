package night

import (
	"context"
	"fmt"

	"github.com/cairnhq/cairn/internal/recon"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// matchOutput pairs invoice lines with purchase-order lines.
type matchOutput struct {
	Matches   []recon.Match     `json:"matches"`
	Unmatched []recon.Unmatched `json:"unmatched"`
}

type matchStep struct{ e *Env }

func (s matchStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var ex extractOutput
	if err := input(ctx, a, Extract, &ex); err != nil {
		return nil, err
	}
	pos, err := recon.LoadPurchaseOrders(ctx, s.e.erp(), recon.PurchaseOrderRefs(ex.Invoices))
	if err != nil {
		return nil, runner.Temporary(fmt.Errorf("reading purchase orders: %w", err))
	}
	m, un := recon.MatchLines(ex.Invoices, pos)
	b, err := output(matchOutput{Matches: m, Unmatched: un})
	if err != nil {
		return nil, err
	}
	var parked []kc.Parked
	for _, u := range un {
		parked = append(parked, kc.Parked{Item: fmt.Sprintf("%s:%d", u.InvoiceNo, u.Line), Reason: u.Reason})
	}
	return &runner.Result{Output: b, Parked: parked, Items: len(m) + len(un),
		NextAction: fmt.Sprintf("compare %d matched lines with the stock received", len(m))}, nil
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

func (s compareStep) Run(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
	var m matchOutput
	if err := input(ctx, a, Match, &m); err != nil {
		return nil, err
	}
	rc, err := recon.LoadReceipts(ctx, s.e.erp(), a.Params.Warehouse, a.Params.Date)
	if err != nil {
		return nil, runner.Temporary(fmt.Errorf("reading stock received: %w", err))
	}
	skus := map[string]bool{}
	var list []string
	for _, x := range m.Matches {
		if !skus[x.SKU] {
			skus[x.SKU] = true
			list = append(list, x.SKU)
		}
	}
	levels, err := recon.LoadStockLevels(ctx, s.e.erp(), a.Params.Warehouse, list)
	if err != nil {
		return nil, runner.Temporary(fmt.Errorf("reading stock levels: %w", err))
	}
	// A rerun keeps the snapshot (and the shadow levels) of the night's first compare: the
	// stock has moved since, by this run's own adjustments.
	first := a.Generation == 0 || a.Record().StockSnapshot == nil
	if a.Params.Shadow && first {
		if err := s.e.ERP.Stock(true).CopyLevelsToShadow(ctx, a.Params.Warehouse, list); err != nil {
			return nil, runner.Temporary(err)
		}
	}
	var snap []byte
	if first {
		if snap, err = output(snapshot{Receipts: rc, Levels: levels}); err != nil {
			return nil, err
		}
	}
	adjs := recon.Compare(m.Matches, rc)
	b, err := output(compareOutput{Adjustments: adjs})
	if err != nil {
		return nil, err
	}
	return &runner.Result{Output: b, Snapshot: snap, Items: len(m.Matches),
		NextAction: fmt.Sprintf("post %d ledger adjustments for %s, then update stock", len(adjs), a.RunID)}, nil
}
