// Package pgtest gives tests a real PostgreSQL server and a fresh database on it.
//
// One server serves every test of a test binary. It is found the first time a test asks:
//
//   - CAIRN_TEST_PG_DSN names an existing server: a postgres:// URL whose user may create
//     and drop databases (CREATEDB). .ci/run starts one and sets it.
//   - Otherwise pgtest starts its own from the PostgreSQL server binaries on the machine
//     (initdb on the PATH or under /usr/lib/postgresql/*/bin): a cluster in a temporary
//     folder, listening on 127.0.0.1 only, with fsync off. As root it runs the server as
//     the postgres user, since PostgreSQL refuses to run as root. A watcher process stops
//     the server and deletes the folder when the test binary exits, however it exits.
//
// When neither works the test is skipped, saying why; when the CI variable is set it
// fails instead, so a CI run never passes without PostgreSQL.
//
// Each [DSN] is a new database, created from template0 with the ICU collation en-US where
// the server has ICU (as production servers usually sort linguistically, not by byte), and
// dropped when the test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// EnvDSN names the variable that points the tests at an existing server.
const EnvDSN = "CAIRN_TEST_PG_DSN"

// server is the test binary's PostgreSQL server.
type server struct {
	admin *url.URL // the DSN the databases are created through
	db    *sql.DB  // a connection pool on admin
}

var (
	once      sync.Once
	shared    *server
	sharedErr error
	fromEnv   bool // the server came from EnvDSN: failing to reach it is never a skip
	databases atomic.Int64
)

// DSN returns the postgres:// DSN of a new, empty database on the test binary's server,
// dropped (with any session still on it) when t ends. It skips t when there is no server
// to be had, or fails it when CAIRN_TEST_PG_DSN is set or CI is.
func DSN(t testing.TB) string {
	t.Helper()
	s := get(t)
	name, err := databaseName()
	if err != nil {
		t.Fatalf("naming a test database: %v", err)
	}
	if err := s.create(t.Context(), name); err != nil {
		t.Fatalf("creating test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// t.Context() is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})
	u := *s.admin
	u.Path = "/" + name
	return u.String()
}

// get returns the shared server, finding or starting it on the first call.
func get(t testing.TB) *server {
	t.Helper()
	once.Do(func() {
		dsn := os.Getenv(EnvDSN)
		fromEnv = dsn != ""
		if !fromEnv {
			dsn, sharedErr = start()
			if sharedErr != nil {
				return
			}
		}
		shared, sharedErr = connect(dsn)
		if sharedErr != nil && fromEnv {
			sharedErr = fmt.Errorf("%s: %w", EnvDSN, sharedErr)
		}
	})
	switch {
	case sharedErr == nil:
		return shared
	case fromEnv:
		t.Fatalf("no PostgreSQL for the tests: %v", sharedErr)
	case inCI():
		t.Fatalf("no PostgreSQL for the tests, and CI is set: %v", sharedErr)
	default:
		t.Skipf("no PostgreSQL for the tests (set %s to a server's DSN, or install the PostgreSQL server binaries): %v", EnvDSN, sharedErr)
	}
	return nil
}

func inCI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// connect opens and checks the pool the databases are created through.
func connect(dsn string) (*server, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// url.Parse's error repeats the DSN, password and all.
		return nil, errors.New("the DSN is not a postgres:// URL")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing the DSN of %s: %w", u.Redacted(), err)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to %s: %w", u.Redacted(), err)
	}
	return &server{admin: u, db: db}, nil
}

// databaseName is unique across the test binaries that share a server.
func databaseName() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return fmt.Sprintf("cairn_test_%d_%d_%s", os.Getpid(), databases.Add(1), hex.EncodeToString(b)), nil
}

// create makes the database, sorting by ICU en-US where the server has ICU. template0,
// which nobody connects to, lets databases be created concurrently.
func (s *server) create(ctx context.Context, name string) error {
	_, err := s.db.ExecContext(ctx, `CREATE DATABASE `+name+` TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'`)
	if err == nil {
		return nil
	}
	// A server without ICU, or older than PostgreSQL 15: its default collation will do.
	if _, err2 := s.db.ExecContext(ctx, `CREATE DATABASE `+name+` TEMPLATE template0 ENCODING 'UTF8'`); err2 != nil {
		return errors.Join(err, err2)
	}
	return nil
}

// IntegerColumns returns the data type of every integer column of the current schema's
// tables ("table.column" → "bigint"), of the named tables only when any are named.
func IntegerColumns(t testing.TB, db *sql.DB, tables ...string) map[string]string {
	t.Helper()
	if tables == nil {
		tables = []string{} // an empty array, not NULL: every table
	}
	rows, err := db.QueryContext(context.Background(), `SELECT table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND data_type IN ('integer', 'smallint', 'bigint')
		AND (cardinality($1::text[]) = 0 OR table_name = ANY($1))`, tables)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var table, column, typ string
		if err := rows.Scan(&table, &column, &typ); err != nil {
			t.Fatal(err)
		}
		out[table+"."+column] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
