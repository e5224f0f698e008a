package recon

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// erpSchema is the ERP database's contract (WORKLOAD.md); stock_levels is shared with
// the stock store, which adds its own tables to the same database.
const erpSchema = `
CREATE TABLE IF NOT EXISTS purchase_orders(po TEXT NOT NULL, line INTEGER NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, unit_price_paise INTEGER NOT NULL, supplier_id TEXT NOT NULL, PRIMARY KEY (po, line));
CREATE TABLE IF NOT EXISTS stock_received(warehouse TEXT NOT NULL, date TEXT NOT NULL, po TEXT NOT NULL, line INTEGER NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, PRIMARY KEY (warehouse, date, po, line));
CREATE TABLE IF NOT EXISTS stock_levels(warehouse TEXT NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, value_paise INTEGER NOT NULL, PRIMARY KEY (warehouse, sku));
`

// OpenSQLite opens (creating if missing) the ERP database at path with WAL, a busy
// timeout, foreign keys and immediate transactions, and creates the ERP tables.
func OpenSQLite(ctx context.Context, path string) (*sql.DB, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening erp database %q: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, erpSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating erp tables in %q: %w", path, err)
	}
	return db, nil
}

// jsonList passes a list as one parameter, read with json_each: no limit on its length.
func jsonList(items []string) string {
	if items == nil {
		items = []string{}
	}
	b, _ := json.Marshal(items) // a []string always encodes
	return string(b)
}

// LoadPurchaseOrders reads every line of the given purchase orders, sorted by PO and line.
func LoadPurchaseOrders(ctx context.Context, db *sql.DB, pos []string) ([]PurchaseOrderLine, error) {
	rows, err := db.QueryContext(ctx, `SELECT po, line, sku, qty, unit_price_paise, supplier_id FROM purchase_orders
		WHERE po IN (SELECT value FROM json_each(?)) ORDER BY po, line`, jsonList(pos))
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", len(pos), err)
	}
	defer rows.Close()
	out := []PurchaseOrderLine{}
	for rows.Next() {
		var p PurchaseOrderLine
		if err := rows.Scan(&p.PO, &p.Line, &p.SKU, &p.Qty, &p.UnitPaise, &p.SupplierID); err != nil {
			return nil, fmt.Errorf("loading purchase orders: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading purchase orders: %w", err)
	}
	return out, nil
}

// LoadReceipts reads what reached the warehouse on date, sorted by PO and line.
func LoadReceipts(ctx context.Context, db *sql.DB, warehouse, date string) ([]Receipt, error) {
	rows, err := db.QueryContext(ctx, `SELECT po, line, sku, qty FROM stock_received
		WHERE warehouse = ? AND date = ? ORDER BY po, line`, warehouse, date)
	if err != nil {
		return nil, fmt.Errorf("loading receipts of %q on %s: %w", warehouse, date, err)
	}
	defer rows.Close()
	out := []Receipt{}
	for rows.Next() {
		var r Receipt
		if err := rows.Scan(&r.PO, &r.Line, &r.SKU, &r.Qty); err != nil {
			return nil, fmt.Errorf("loading receipts of %q on %s: %w", warehouse, date, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading receipts of %q on %s: %w", warehouse, date, err)
	}
	return out, nil
}

// queryer is what the stock-level read needs: a *sql.DB, or a *sql.Tx inside gen.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// LoadStockLevels reads the warehouse's levels of the given SKUs, sorted by SKU. A SKU
// the warehouse has no level for is left out.
func LoadStockLevels(ctx context.Context, db *sql.DB, warehouse string, skus []string) ([]StockLevel, error) {
	return loadStockLevels(ctx, db, warehouse, skus)
}

func loadStockLevels(ctx context.Context, q queryer, warehouse string, skus []string) ([]StockLevel, error) {
	rows, err := q.QueryContext(ctx, `SELECT sku, qty, value_paise FROM stock_levels
		WHERE warehouse = ? AND sku IN (SELECT value FROM json_each(?)) ORDER BY sku`, warehouse, jsonList(skus))
	if err != nil {
		return nil, fmt.Errorf("loading stock levels of %q: %w", warehouse, err)
	}
	defer rows.Close()
	out := []StockLevel{}
	for rows.Next() {
		var l StockLevel
		if err := rows.Scan(&l.SKU, &l.Qty, &l.ValuePaise); err != nil {
			return nil, fmt.Errorf("loading stock levels of %q: %w", warehouse, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading stock levels of %q: %w", warehouse, err)
	}
	return out, nil
}
