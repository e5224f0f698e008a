package books

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/cairnhq/cairn/pkg/sqlidem"
)

// Level is a stock_levels row's quantity and value.
type Level struct {
	Qty, ValuePaise int64
}

// skuChunk bounds the placeholders of one IN list, far below any driver's limit.
const skuChunk = 500

// Levels reads the stock levels of skus in warehouse, keyed by sku. An sku
// with no row is absent from the map. Empty skus means every sku of the
// warehouse.
func (s *Stock) Levels(ctx context.Context, warehouse string, skus []string) (map[string]Level, error) {
	levels := make(map[string]Level, len(skus))
	err := forChunks(skus, func(chunk []string) error {
		query, args := inWarehouse(`SELECT sku, qty, value_paise FROM `+s.t.levels, warehouse, chunk)
		rows, err := s.db.sql.QueryContext(ctx, s.db.q(query), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				sku string
				l   Level
			)
			if err := rows.Scan(&sku, &l.Qty, &l.ValuePaise); err != nil {
				return err
			}
			levels[sku] = l
		}
		return rows.Err()
	})
	if err != nil {
		return nil, sqlidem.Transient(fmt.Errorf("reading stock levels of warehouse %q: %w", warehouse, err))
	}
	return levels, nil
}

// CopyLevelsToShadow copies the stock_levels rows of skus in warehouse into
// shadow_stock_levels where the shadow has no row yet: a shadow run's compare
// step does it, so that its adjustments start from the real levels. Rows the
// shadow already holds are left as they are (a repeat copies nothing). Empty
// skus means every sku of the warehouse. It copies from the real table to
// the shadow whichever view s is.
func (s *Stock) CopyLevelsToShadow(ctx context.Context, warehouse string, skus []string) error {
	src, dst := tablesFor(false), tablesFor(true)
	err := s.db.write(ctx, func(tx *sql.Tx) error {
		return forChunks(skus, func(chunk []string) error {
			// ON CONFLICT DO NOTHING rather than INSERT OR IGNORE: it ignores
			// only the existing rows, and PostgreSQL spells it the same. Rows go
			// in sku order: two copies of the same skus at once then take their
			// row locks in one order (PostgreSQL), and neither waits in a cycle.
			query, args := inWarehouse(`INSERT INTO `+dst.levels+`(warehouse, sku, qty, value_paise)
				SELECT warehouse, sku, qty, value_paise FROM `+src.levels, warehouse, chunk)
			_, err := tx.ExecContext(ctx, s.db.q(query+` ORDER BY sku ON CONFLICT(warehouse, sku) DO NOTHING`), args...)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("copying stock levels of warehouse %q to the shadow: %w", warehouse, err)
	}
	return nil
}

// inWarehouse appends the WHERE clause choosing warehouse and, unless skus
// is empty, those skus.
func inWarehouse(query, warehouse string, skus []string) (string, []any) {
	args := []any{warehouse}
	query += ` WHERE warehouse = ?`
	if len(skus) > 0 {
		query += ` AND sku IN (` + placeholders(len(skus)) + `)`
		for _, sku := range skus {
			args = append(args, sku)
		}
	}
	return query, args
}

// forChunks calls fn on skus in chunks of skuChunk, and once with nil when
// skus is empty.
func forChunks(skus []string, fn func([]string) error) error {
	if len(skus) == 0 {
		return fn(nil)
	}
	for len(skus) > 0 {
		n := min(len(skus), skuChunk)
		if err := fn(skus[:n]); err != nil {
			return err
		}
		skus = skus[n:]
	}
	return nil
}
