package books

import (
	"testing"

	"github.com/cairnhq/cairn/pkg/fence"
)

// The tables others keep in the same database (the ERP's): created as the contract's are,
// with the dialect a reader of SQL() needs to spell its queries.
func TestCreateTablesAndDialect(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		want := fence.SQLite
		if b.name == "postgres" {
			want = fence.Postgres
		}
		if db.Dialect() != want || DialectOf(db.SQL()) != want {
			t.Fatalf("Dialect() = %s, DialectOf(SQL()) = %s, want %s", db.Dialect(), DialectOf(db.SQL()), want)
		}
		ctx := t.Context()
		const stmt = `CREATE TABLE IF NOT EXISTS others(id TEXT PRIMARY KEY, n INTEGER NOT NULL)`
		for range 2 { // a second call finds the table there
			if err := db.CreateTables(ctx, stmt); err != nil {
				t.Fatalf("CreateTables: %v", err)
			}
		}
		// 2^40 needs the 64 bits SQLite's INTEGER has, a BIGINT on PostgreSQL.
		if _, err := db.SQL().ExecContext(ctx, Rebind(db.Dialect(), `INSERT INTO others VALUES (?, ?)`), "a", int64(1)<<40); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := db.SQL().QueryRowContext(ctx, Rebind(db.Dialect(), `SELECT n FROM others WHERE id = ?`), "a").Scan(&n); err != nil || n != 1<<40 {
			t.Fatalf("n = %d, %v, want 2^40", n, err)
		}
	})
}
