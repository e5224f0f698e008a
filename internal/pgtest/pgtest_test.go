package pgtest

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func databaseOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// Each DSN is its own empty database on a server that listens on loopback only, sorts
// linguistically, and drops the database when its test ends.
func TestDSN(t *testing.T) {
	var first string
	t.Run("first", func(t *testing.T) {
		first = DSN(t)
		db := open(t, first)
		if _, err := db.ExecContext(t.Context(), `CREATE TABLE t(k TEXT PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		second := DSN(t)
		if databaseOf(t, first) == databaseOf(t, second) {
			t.Fatalf("two DSNs name one database %s", databaseOf(t, first))
		}
		var n int
		if err := open(t, second).QueryRowContext(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("the second database holds %d tables (%v), want 0", n, err)
		}
		var collate string
		if err := db.QueryRowContext(t.Context(), `SELECT CASE WHEN 'B' < 'a' THEN 'bytes' ELSE 'linguistic' END`).Scan(&collate); err != nil {
			t.Fatal(err)
		}
		t.Logf("the test database sorts %s", collate)
	})
	if t.Skipped() || first == "" {
		return
	}
	// The database is gone once its test ended.
	s := get(t)
	var n int
	if err := s.db.QueryRowContext(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, databaseOf(t, first)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s: %d rows (%v) after its test, want none", databaseOf(t, first), n, err)
	}
}

// A server pgtest started itself listens on 127.0.0.1 only.
func TestListensOnLoopback(t *testing.T) {
	db := open(t, DSN(t))
	var addrs string
	if err := db.QueryRowContext(t.Context(), `SHOW listen_addresses`).Scan(&addrs); err != nil {
		t.Fatal(err)
	}
	if fromEnv {
		t.Skipf("the server comes from %s (listen_addresses %q): not ours to check", EnvDSN, addrs)
	}
	if addrs != "127.0.0.1" {
		t.Fatalf("listen_addresses = %q, want 127.0.0.1", addrs)
	}
}
