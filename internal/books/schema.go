package books

import (
	"fmt"
	"strings"

	"github.com/cairnhq/cairn/pkg/fence"
)

// The tables of the contract (DESIGN.md, "The outside systems"), with %[1]s
// standing for the table prefix: "" or "shadow_".
var tableTemplates = []string{
	`CREATE TABLE IF NOT EXISTS %[1]sledger_entries(key TEXT PRIMARY KEY, run_id TEXT NOT NULL, invoice_no TEXT NOT NULL, line INTEGER NOT NULL,
  kind TEXT NOT NULL, supplier_id TEXT NOT NULL, amount_paise INTEGER NOT NULL,
  reverses TEXT NULL REFERENCES %[1]sledger_entries(key), created_at TEXT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS %[1]sstock_adjustments(key TEXT PRIMARY KEY, run_id TEXT NOT NULL, warehouse TEXT NOT NULL, sku TEXT NOT NULL,
  supplier_id TEXT NOT NULL, qty_delta INTEGER NOT NULL, value_delta_paise INTEGER NOT NULL,
  reason TEXT NOT NULL, reverses TEXT NULL REFERENCES %[1]sstock_adjustments(key), created_at TEXT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS %[1]sstock_levels(warehouse TEXT NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, value_paise INTEGER NOT NULL,
  PRIMARY KEY (warehouse, sku))`,
	`CREATE TABLE IF NOT EXISTS %[1]sfences(run_id TEXT PRIMARY KEY, epoch TEXT NOT NULL, token INTEGER NOT NULL)`,
	// A row is reversed at most once (reversal.go); NULLs (rows that reverse nothing) repeat.
	`CREATE UNIQUE INDEX IF NOT EXISTS %[1]sledger_entries_reverses ON %[1]sledger_entries(reverses)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS %[1]sstock_adjustments_reverses ON %[1]sstock_adjustments(reverses)`,
}

const shadowPrefix = "shadow_"

// schemaLockKey is the PostgreSQL advisory lock Open and CreateTables hold
// while they create tables ("cairn" in ASCII).
const schemaLockKey int64 = 0x636169726e

// schema returns the statements that create every table and its shadow copy.
// SQLite's INTEGER holds 64 bits; PostgreSQL's holds 32, so there every
// INTEGER is a BIGINT: tokens are stream revisions, and amounts and stock
// values in paise outgrow 32 bits.
func schema(d fence.Dialect) []string {
	var stmts []string
	for _, prefix := range []string{"", shadowPrefix} {
		for _, tmpl := range tableTemplates {
			stmts = append(stmts, widen(d, fmt.Sprintf(tmpl, prefix)))
		}
	}
	return stmts
}

// widen spells a CREATE TABLE statement written for SQLite in d's SQL.
func widen(d fence.Dialect, stmt string) string {
	if d == fence.Postgres {
		return strings.ReplaceAll(stmt, "INTEGER", "BIGINT")
	}
	return stmt
}

// tables names the tables of one view.
type tables struct {
	ledger, adjustments, levels, fences string
}

func tablesFor(shadow bool) tables {
	prefix := ""
	if shadow {
		prefix = shadowPrefix
	}
	return tables{
		ledger:      prefix + "ledger_entries",
		adjustments: prefix + "stock_adjustments",
		levels:      prefix + "stock_levels",
		fences:      prefix + "fences",
	}
}
