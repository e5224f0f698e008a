package recon

import (
	"path/filepath"
	"slices"
	"testing"
)

func TestOpenSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "erp.db")
	db, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var mode string
	var fk, busy int
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Fatalf("foreign_keys = %d, %v", fk, err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 10000 {
		t.Fatalf("busy_timeout = %d, %v", busy, err)
	}

	_, err = db.ExecContext(ctx, `INSERT INTO purchase_orders VALUES ('PO-2',1,'NUT-M8',200,325,'SUP-07'), ('PO-1',2,'NUT-M8',10,325,'SUP-07'),
		('PO-1',1,'BOLT-M8-50',200,1200,'SUP-07'), ('PO-3',1,'NUT-M8',5,325,'SUP-07');
		INSERT INTO stock_received VALUES ('ldh','2026-10-13','PO-1',2,'NUT-M8',10), ('ldh','2026-10-13','PO-1',1,'BOLT-M8-50',180),
		('ldh','2026-10-14','PO-2',1,'NUT-M8',200), ('del','2026-10-13','PO-3',1,'NUT-M8',5);
		INSERT INTO stock_levels VALUES ('ldh','NUT-M8',1200,390000), ('ldh','BOLT-M8-50',10,12500), ('del','NUT-M8',1,325);`)
	if err != nil {
		t.Fatal(err)
	}
	// A second open of the same file keeps what is there.
	again, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	again.Close()

	pos, err := LoadPurchaseOrders(ctx, db, []string{"PO-1", "PO-2", "PO-9"})
	if err != nil {
		t.Fatal(err)
	}
	wantPOs := []PurchaseOrderLine{
		{PO: "PO-1", Line: 1, SKU: "BOLT-M8-50", Qty: 200, UnitPaise: 1200, SupplierID: "SUP-07"},
		{PO: "PO-1", Line: 2, SKU: "NUT-M8", Qty: 10, UnitPaise: 325, SupplierID: "SUP-07"},
		{PO: "PO-2", Line: 1, SKU: "NUT-M8", Qty: 200, UnitPaise: 325, SupplierID: "SUP-07"},
	}
	if !slices.Equal(pos, wantPOs) {
		t.Fatalf("purchase orders = %+v", pos)
	}
	if none, err := LoadPurchaseOrders(ctx, db, nil); err != nil || len(none) != 0 {
		t.Fatalf("no purchase orders asked: %+v, %v", none, err)
	}

	recv, err := LoadReceipts(ctx, db, "ldh", "2026-10-13")
	if err != nil {
		t.Fatal(err)
	}
	wantRecv := []Receipt{{PO: "PO-1", Line: 1, SKU: "BOLT-M8-50", Qty: 180}, {PO: "PO-1", Line: 2, SKU: "NUT-M8", Qty: 10}}
	if !slices.Equal(recv, wantRecv) {
		t.Fatalf("receipts = %+v", recv)
	}

	levels, err := LoadStockLevels(ctx, db, "ldh", []string{"NUT-M8", "BOLT-M8-50", "WASHER-M8"})
	if err != nil {
		t.Fatal(err)
	}
	wantLevels := []StockLevel{{SKU: "BOLT-M8-50", Qty: 10, ValuePaise: 12500}, {SKU: "NUT-M8", Qty: 1200, ValuePaise: 390000}}
	if !slices.Equal(levels, wantLevels) {
		t.Fatalf("stock levels = %+v", levels)
	}
}
