package recon

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/fence"
)

// erpTables is the ERP database's contract (WORKLOAD.md), in SQLite's SQL: on PostgreSQL
// books makes every INTEGER a BIGINT. stock_levels is shared with the stock store, whose
// tables books adds to the same database.
var erpTables = []string{
	`CREATE TABLE IF NOT EXISTS purchase_orders(po TEXT NOT NULL, line INTEGER NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, unit_price_paise INTEGER NOT NULL, supplier_id TEXT NOT NULL, PRIMARY KEY (po, line))`,
	`CREATE TABLE IF NOT EXISTS stock_received(warehouse TEXT NOT NULL, date TEXT NOT NULL, po TEXT NOT NULL, line INTEGER NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, PRIMARY KEY (warehouse, date, po, line))`,
	`CREATE TABLE IF NOT EXISTS stock_levels(warehouse TEXT NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, value_paise INTEGER NOT NULL, PRIMARY KEY (warehouse, sku))`,
}

// OpenERP opens the ERP database at dsn, "sqlite:PATH" or "postgres://..." as
// [books.Open] takes it, and creates the ERP's tables next to the stock store's.
func OpenERP(ctx context.Context, dsn string) (*books.DB, error) {
	db, err := books.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("opening erp database: %w", err)
	}
	if err := CreateERPTables(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// CreateERPTables creates the ERP's tables in db where missing, so the night can read
// them before the first gen.
func CreateERPTables(ctx context.Context, db *books.DB) error {
	if err := db.CreateTables(ctx, erpTables...); err != nil {
		return fmt.Errorf("creating erp tables: %w", err)
	}
	return nil
}

// OpenSQLite opens (creating if missing) the ERP database in the SQLite file at path, with
// WAL, a busy timeout, foreign keys and immediate transactions: [OpenERP] of
// "sqlite:"+path, for callers that want the *sql.DB.
func OpenSQLite(ctx context.Context, path string) (*sql.DB, error) {
	db, err := OpenERP(ctx, "sqlite:"+path)
	if err != nil {
		return nil, err
	}
	return db.SQL(), nil
}

// erpSQL spells the ERP's queries, written in SQLite's SQL with ? placeholders, in one
// database's SQL.
type erpSQL fence.Dialect

// erpSQLOf is the SQL of a database opened by books.Open.
func erpSQLOf(db *sql.DB) erpSQL { return erpSQL(books.DialectOf(db)) }

func (s erpSQL) postgres() bool { return fence.Dialect(s) == fence.Postgres }

// q rebinds query's placeholders.
func (s erpSQL) q(query string) string { return books.Rebind(fence.Dialect(s), query) }

// bytewise is col compared and sorted byte by byte, as SQLite does by default, whatever
// collation the PostgreSQL database sorts by.
func (s erpSQL) bytewise(col string) string {
	if s.postgres() {
		return col + ` COLLATE "C"`
	}
	return col
}

// in is the condition "col is one of a list", the list passed as one parameter (list's
// result), so it has no limit on its length.
func (s erpSQL) in(col string) string {
	if s.postgres() {
		return col + ` = ANY(?)`
	}
	return col + ` IN (SELECT value FROM json_each(?))`
}

// list is the parameter of in: a text array on PostgreSQL, a JSON array on SQLite.
func (s erpSQL) list(items []string) any {
	if items == nil {
		items = []string{}
	}
	if s.postgres() {
		return items
	}
	b, _ := json.Marshal(items) // a []string always encodes
	return string(b)
}

// LoadPurchaseOrders reads every line of the given purchase orders, sorted by PO (byte
// order) and line. db is the ERP database as books.Open opened it, SQLite or PostgreSQL.
func LoadPurchaseOrders(ctx context.Context, db *sql.DB, pos []string) ([]PurchaseOrderLine, error) {
	s := erpSQLOf(db)
	rows, err := db.QueryContext(ctx, s.q(`SELECT po, line, sku, qty, unit_price_paise, supplier_id FROM purchase_orders
		WHERE `+s.in("po")+` ORDER BY `+s.bytewise("po")+`, line`), s.list(pos))
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

// LoadReceipts reads what reached the warehouse on date, sorted by PO (byte order) and
// line.
func LoadReceipts(ctx context.Context, db *sql.DB, warehouse, date string) ([]Receipt, error) {
	s := erpSQLOf(db)
	rows, err := db.QueryContext(ctx, s.q(`SELECT po, line, sku, qty FROM stock_received
		WHERE warehouse = ? AND date = ? ORDER BY `+s.bytewise("po")+`, line`), warehouse, date)
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

// LoadStockLevels reads the warehouse's levels of the given SKUs, sorted by SKU (byte
// order). A SKU the warehouse has no level for is left out.
func LoadStockLevels(ctx context.Context, db *sql.DB, warehouse string, skus []string) ([]StockLevel, error) {
	return loadStockLevels(ctx, db, erpSQLOf(db), warehouse, skus)
}

func loadStockLevels(ctx context.Context, q queryer, s erpSQL, warehouse string, skus []string) ([]StockLevel, error) {
	rows, err := q.QueryContext(ctx, s.q(`SELECT sku, qty, value_paise FROM stock_levels
		WHERE warehouse = ? AND `+s.in("sku")+` ORDER BY `+s.bytewise("sku")), warehouse, s.list(skus))
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
