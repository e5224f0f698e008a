package recon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
)

// writeDocuments writes the night's documents and removes any other .txt left in the
// night's folder by an earlier gen, so the folder holds exactly this night.
func writeDocuments(ctx context.Context, c GenConfig, n *night) error {
	dir := NightDir(c.InboxDir, c.Warehouse, c.Date)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating inbox %q: %w", dir, err)
	}
	keep := make(map[string]bool, len(n.invoices)+len(n.garbled))
	write := func(no string, text []byte) error {
		keep[no+docExt] = true
		path := filepath.Join(dir, no+docExt)
		if err := os.WriteFile(path, text, 0o644); err != nil {
			return fmt.Errorf("writing document %q: %w", path, err)
		}
		return nil
	}
	billTo := warehouseName(c.Warehouse)
	for i, inv := range n.invoices {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("writing documents: %w", err)
			}
		}
		if err := write(inv.InvoiceNo, renderInvoice(inv, billTo)); err != nil {
			return err
		}
	}
	for _, g := range n.garbled {
		if err := write(g.invoiceNo, g.text); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing inbox %q: %w", dir, err)
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, docExt) && !keep[name] {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("removing stale document %q: %w", name, err)
			}
		}
	}
	return nil
}

// erpDSN is the DSN of the ERP database GenConfig.ERPPath names: a SQLite file path, or
// a DSN ("sqlite:PATH", "postgres://..."). A SQLite file's folder is created if missing.
func erpDSN(target string) (string, error) {
	if strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://") {
		return target, nil
	}
	path := strings.TrimPrefix(target, "sqlite:")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("creating folder of erp database %q: %w", path, err)
	}
	return "sqlite:" + path, nil
}

// writeERP replaces the night's purchase orders and receipts, sets the stock levels of
// SKUs the warehouse has not seen, and returns the levels of every SKU the night touches
// as they stand after gen: the truth's "before". One transaction, on SQLite or PostgreSQL.
func writeERP(ctx context.Context, c GenConfig, n *night) (before []StockLevel, err error) {
	dsn, err := erpDSN(c.ERPPath)
	if err != nil {
		return nil, err
	}
	erp, err := OpenERP(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer erp.Close()
	s := erpSQL(erp.Dialect())
	tx, err := erp.SQL().BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning erp transaction: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	if err := replaceOrders(ctx, tx, s, c, n); err != nil {
		return nil, err
	}
	skus := SKUs(n.invoices)
	if err := seedStockLevels(ctx, tx, s, c.Warehouse, skus, n); err != nil {
		return nil, err
	}
	if before, err = loadStockLevels(ctx, tx, s, c.Warehouse, skus); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("committing erp rows of %s %s: %w", c.Warehouse, c.Date, err)
	}
	return before, nil
}

func replaceOrders(ctx context.Context, tx *sql.Tx, s erpSQL, c GenConfig, n *night) error {
	lo := "PO-" + poPrefix(c.Warehouse, c.Date) + "-"
	hi := lo[:len(lo)-1] + "." // '.' follows '-' byte by byte: every PO of the night sorts in [lo, hi)
	inNight := s.bytewise("po") + ` >= ? AND ` + s.bytewise("po") + ` < ?`
	var ow, od string
	err := tx.QueryRowContext(ctx, s.q(`SELECT warehouse, date FROM stock_received
		WHERE `+inNight+` AND NOT (warehouse = ? AND date = ?) LIMIT 1`), lo, hi, c.Warehouse, c.Date).Scan(&ow, &od)
	switch {
	case err == nil:
		return fmt.Errorf("purchase orders %s* of %s %s are taken by %s %s: %w", lo, c.Warehouse, c.Date, ow, od, ErrPOCollision)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("checking purchase orders %s*: %w", lo, err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM purchase_orders WHERE `+inNight), lo, hi); err != nil {
		return fmt.Errorf("removing purchase orders %s*: %w", lo, err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM stock_received WHERE warehouse = ? AND date = ?`), c.Warehouse, c.Date); err != nil {
		return fmt.Errorf("removing receipts of %s %s: %w", c.Warehouse, c.Date, err)
	}
	insPO, err := tx.PrepareContext(ctx, s.q(`INSERT INTO purchase_orders(po, line, sku, qty, unit_price_paise, supplier_id) VALUES (?, ?, ?, ?, ?, ?)`))
	if err != nil {
		return fmt.Errorf("preparing purchase-order insert: %w", err)
	}
	defer insPO.Close()
	insRecv, err := tx.PrepareContext(ctx, s.q(`INSERT INTO stock_received(warehouse, date, po, line, sku, qty) VALUES (?, ?, ?, ?, ?, ?)`))
	if err != nil {
		return fmt.Errorf("preparing receipt insert: %w", err)
	}
	defer insRecv.Close()
	for i, inv := range n.invoices {
		for j, l := range inv.Lines {
			// The purchase order ordered what was billed; receipts say what came.
			if _, err := insPO.ExecContext(ctx, inv.PORef, l.No, l.SKU, l.Qty, n.poUnit[i][j], inv.SupplierID); err != nil {
				return fmt.Errorf("inserting purchase order %s line %d: %w", inv.PORef, l.No, err)
			}
			if _, err := insRecv.ExecContext(ctx, c.Warehouse, c.Date, inv.PORef, l.No, l.SKU, n.received[i][j]); err != nil {
				return fmt.Errorf("inserting receipt %s line %d: %w", inv.PORef, l.No, err)
			}
		}
	}
	return nil
}

// seedStockLevels gives every SKU the warehouse has not seen a base stock plus what this
// night's invoices booked (billed quantities and values). Known SKUs keep their levels:
// they are the warehouse's running state.
func seedStockLevels(ctx context.Context, tx *sql.Tx, s erpSQL, warehouse string, skus []string, n *night) error {
	known, err := loadStockLevels(ctx, tx, s, warehouse, skus)
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(known))
	for _, l := range known {
		have[l.SKU] = true
	}
	booked := map[string]StockLevel{}
	for _, inv := range n.invoices {
		for _, l := range inv.Lines {
			b := booked[l.SKU]
			b.Qty += l.Qty
			b.ValuePaise += l.AmountPaise
			booked[l.SKU] = b
		}
	}
	ins, err := tx.PrepareContext(ctx, s.q(`INSERT INTO stock_levels(warehouse, sku, qty, value_paise) VALUES (?, ?, ?, ?)`))
	if err != nil {
		return fmt.Errorf("preparing stock-level insert: %w", err)
	}
	defer ins.Close()
	for _, sku := range skus {
		if have[sku] {
			continue
		}
		baseQty := baseStock(sku)
		b := booked[sku]
		if _, err := ins.ExecContext(ctx, warehouse, sku, baseQty+b.Qty, baseQty*n.listPrice[sku]+b.ValuePaise); err != nil {
			return fmt.Errorf("inserting stock level of %s in %s: %w", sku, warehouse, err)
		}
	}
	return nil
}

// baseStock is what a warehouse held of a SKU before its first generated night: fixed
// per SKU (100 to 1,050 pieces) so it needs no draw from the night's random stream.
func baseStock(sku string) int64 {
	h := fnv.New32a()
	h.Write([]byte(sku))
	return 100 + int64(h.Sum32()%20)*50
}

// writeTruth writes the truth through a temporary file, so a reader never sees half.
func writeTruth(c GenConfig, t Truth) error {
	b, err := encodeTruth(t)
	if err != nil {
		return err
	}
	path := TruthPath(c.TruthDir, c.Warehouse, c.Date)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating truth folder for %q: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing truth %q: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing truth %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing truth %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing truth %q: %w", path, err)
	}
	return nil
}
