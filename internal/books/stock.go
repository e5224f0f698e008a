package books

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/sqlidem"
)

// Adjustment is a stock_adjustments row.
type Adjustment struct {
	Key, RunID, Warehouse, SKU, SupplierID string
	QtyDelta, ValueDeltaPaise              int64
	Reason                                 string
	Reverses                               string // the reversed key; "" is NULL
	// CreatedAt is RFC 3339 UTC from the caller's clock; not part of the payload.
	CreatedAt string
}

// payload is every column but key and created_at, spelt for error messages and digests.
func (a Adjustment) payload() fields {
	return fields{
		{"run_id", fmt.Sprintf("%q", a.RunID)}, {"warehouse", fmt.Sprintf("%q", a.Warehouse)},
		{"sku", fmt.Sprintf("%q", a.SKU)}, {"supplier_id", fmt.Sprintf("%q", a.SupplierID)},
		{"qty_delta", fmt.Sprint(a.QtyDelta)}, {"value_delta_paise", fmt.Sprint(a.ValueDeltaPaise)},
		{"reason", fmt.Sprintf("%q", a.Reason)}, {"reverses", fmt.Sprintf("%q", a.Reverses)},
	}
}

func (a Adjustment) samePayload(o Adjustment) bool {
	a.Key, a.CreatedAt, o.Key, o.CreatedAt = "", "", "", ""
	return a == o
}

// Stock is the stock store of one DB: stock_adjustments and stock_levels (or
// their shadows).
type Stock struct {
	db *DB
	t  tables
}

// AdoptFence moves the run's fence to t's epoch and token, as Ledger.AdoptFence.
func (s *Stock) AdoptFence(ctx context.Context, t fence.Token) error {
	if err := fence.Adopt(ctx, s.db.sql, s.db.dialect, s.t.fences, t); err != nil {
		return sqlidem.Transient(fmt.Errorf("adopting stock fence: %w", err))
	}
	return nil
}

// RaiseFence raises the stock database's fence to t, outside any write:
// call it right after taking a lease.
func (s *Stock) RaiseFence(ctx context.Context, t fence.Token) error {
	if err := fence.Hold(ctx, s.db.sql, s.db.dialect, s.t.fences, t); err != nil {
		return sqlidem.Transient(fmt.Errorf("raising stock fence: %w", err))
	}
	return nil
}

// Apply writes a in one transaction: the fence check, the insert, and the
// change of stock_levels(warehouse, sku) by (qty_delta, value_delta_paise).
// It returns true when a was inserted. A key that already holds the same
// payload changes nothing, the levels included, and returns false. A key
// holding another payload is ErrConflict, a missing level row
// ErrNoStockLevel, a reversal of a missing key ErrNoOriginal, and a held
// fence fence.ErrFenced or fence.ErrForeignEpoch; none of them writes anything.
func (s *Stock) Apply(ctx context.Context, t fence.Token, a Adjustment) (inserted bool, err error) {
	if err := checkAdjustment(t, a); err != nil {
		return false, fmt.Errorf("applying stock adjustment %q: %w", a.Key, err)
	}
	err = s.db.write(ctx, func(tx *sql.Tx) error {
		if err := fence.Hold(ctx, tx, s.db.dialect, s.t.fences, t); err != nil {
			return err
		}
		if a.Reverses != "" {
			if err := s.checkReversal(ctx, tx, a); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, s.db.q(`INSERT INTO `+s.t.adjustments+
			`(key, run_id, warehouse, sku, supplier_id, qty_delta, value_delta_paise, reason, reverses, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO NOTHING`),
			a.Key, a.RunID, a.Warehouse, a.SKU, a.SupplierID, a.QtyDelta, a.ValueDeltaPaise, a.Reason, nullable(a.Reverses), a.CreatedAt)
		if err != nil {
			return fmt.Errorf("inserting: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("inserting: %w", err)
		}
		if n == 0 {
			stored, ok, err := s.get(ctx, tx, a.Key)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("key neither inserted nor found")
			}
			if !stored.samePayload(a) {
				return conflict(a.Key, stored.payload(), a.payload())
			}
			return nil
		}
		res, err = tx.ExecContext(ctx, s.db.q(`UPDATE `+s.t.levels+
			` SET qty = qty + ?, value_paise = value_paise + ? WHERE warehouse = ? AND sku = ?`),
			a.QtyDelta, a.ValueDeltaPaise, a.Warehouse, a.SKU)
		if err != nil {
			return fmt.Errorf("changing stock level of %s/%s: %w", a.Warehouse, a.SKU, err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return fmt.Errorf("changing stock level of %s/%s: %w", a.Warehouse, a.SKU, err)
		}
		if n == 0 {
			return fmt.Errorf("warehouse %q sku %q: %w", a.Warehouse, a.SKU, ErrNoStockLevel)
		}
		inserted = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("applying stock adjustment %q: %w", a.Key, err)
	}
	return inserted, nil
}

func checkAdjustment(t fence.Token, a Adjustment) error {
	switch {
	case a.Key == "":
		return fmt.Errorf("empty key: %w", ErrInvalid)
	case a.RunID != t.RunID:
		return fmt.Errorf("adjustment of run %q under the token of run %q: %w", a.RunID, t.RunID, ErrInvalid)
	case a.Reverses == a.Key:
		return fmt.Errorf("adjustment reverses itself: %w", ErrInvalid)
	}
	return checkCreatedAt(a.CreatedAt)
}

const adjustmentColumns = `key, run_id, warehouse, sku, supplier_id, qty_delta, value_delta_paise, reason, reverses, created_at`

func scanAdjustment(sc interface{ Scan(...any) error }) (Adjustment, error) {
	var (
		a        Adjustment
		reverses sql.NullString
	)
	err := sc.Scan(&a.Key, &a.RunID, &a.Warehouse, &a.SKU, &a.SupplierID, &a.QtyDelta, &a.ValueDeltaPaise, &a.Reason, &reverses, &a.CreatedAt)
	a.Reverses = reverses.String
	return a, err
}

func (s *Stock) get(ctx context.Context, q rowQuerier, key string) (Adjustment, bool, error) {
	row := q.QueryRowContext(ctx, s.db.q(`SELECT `+adjustmentColumns+` FROM `+s.t.adjustments+` WHERE key = ?`), key)
	a, err := scanAdjustment(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Adjustment{}, false, nil
	}
	if err != nil {
		return Adjustment{}, false, sqlidem.Transient(fmt.Errorf("reading stock adjustment %q: %w", key, err))
	}
	return a, true, nil
}

// Get reads the adjustment under key; false when there is none.
func (s *Stock) Get(ctx context.Context, key string) (Adjustment, bool, error) {
	return s.get(ctx, s.db.sql, key)
}

// ListRun returns every adjustment of a run, reversals included, ordered by key byte by byte
// (on PostgreSQL too, whatever the database's collation).
func (s *Stock) ListRun(ctx context.Context, runID string) ([]Adjustment, error) {
	rows, err := s.db.sql.QueryContext(ctx, s.db.q(`SELECT `+adjustmentColumns+` FROM `+s.t.adjustments+` WHERE run_id = ?`+s.db.orderByKey()), runID)
	if err != nil {
		return nil, sqlidem.Transient(fmt.Errorf("listing stock adjustments of run %q: %w", runID, err))
	}
	defer rows.Close()
	var adjs []Adjustment
	for rows.Next() {
		a, err := scanAdjustment(rows)
		if err != nil {
			return nil, sqlidem.Transient(fmt.Errorf("listing stock adjustments of run %q: %w", runID, err))
		}
		adjs = append(adjs, a)
	}
	if err := rows.Err(); err != nil {
		return nil, sqlidem.Transient(fmt.Errorf("listing stock adjustments of run %q: %w", runID, err))
	}
	return adjs, nil
}
