package recon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Truth is a night's ground truth as gen wrote it (WORKLOAD.md): tests compare a run
// against it rather than against the code's own output. Lists are sorted: adjustments
// by key suffix, debit notes by supplier id, stock levels by SKU, parked by invoice.
type Truth struct {
	Warehouse         string            `json:"warehouse"`
	Date              string            `json:"date"`
	Seed              int64             `json:"seed"`
	Invoices          int               `json:"invoices"` // readable invoices
	Adjustments       []TruthAdjustment `json:"adjustments"`
	DebitNotes        []TruthDebitNote  `json:"debit_notes"`
	StockLevelsBefore []StockLevel      `json:"stock_levels_before"` // every SKU the night touches
	StockLevelsAfter  []StockLevel      `json:"stock_levels_after"`
	Parked            []Parked          `json:"parked"`
	Report            TruthReport       `json:"report"`
}

// TruthAdjustment is an adjustment with its key suffix, as the truth file lists it.
type TruthAdjustment struct {
	KeySuffix string `json:"key_suffix"`
	Adjustment
}

// TruthDebitNote is the total one supplier must be sent a debit note for.
type TruthDebitNote struct {
	SupplierID string `json:"supplier_id"`
	TotalPaise int64  `json:"total_paise"`
}

// TruthReport is the figures the night's report must show.
type TruthReport struct {
	Invoices    int   `json:"invoices"`
	Lines       int   `json:"lines"`
	Adjustments int   `json:"adjustments"`
	TotalPaise  int64 `json:"total_paise"`
}

// TruthPath is where gen writes a night's truth: <truthDir>/<warehouse>/<date>.json.
func TruthPath(truthDir, warehouse, date string) string {
	return filepath.Join(truthDir, warehouse, date+".json")
}

// LoadTruth reads a truth file.
func LoadTruth(path string) (Truth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Truth{}, fmt.Errorf("loading truth %q: %w", path, err)
	}
	var t Truth
	if err := json.Unmarshal(b, &t); err != nil {
		return Truth{}, fmt.Errorf("decoding truth %q: %w", path, err)
	}
	return t, nil
}

func encodeTruth(t Truth) ([]byte, error) {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding truth of %s %s: %w", t.Warehouse, t.Date, err)
	}
	return append(b, '\n'), nil
}
