package books

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/cairnhq/cairn/pkg/fence"
)

// openPostgres opens a postgres:// DSN through pgx's database/sql driver.
func openPostgres(ctx context.Context, scheme, dsn string) (*DB, error) {
	cfg, u, err := parsePostgres(scheme, dsn)
	if err != nil {
		return nil, err
	}
	sqlDB := stdlib.OpenDB(*cfg)
	db := &DB{sql: sqlDB, dialect: fence.Postgres}
	if err := db.init(ctx); err != nil {
		sqlDB.Close()
		if refused(err) {
			err = fmt.Errorf("%w: %w", ErrRefused, err)
		}
		return nil, fmt.Errorf("opening books %s: %w", u.Redacted(), redact(err, u))
	}
	return db, nil
}

// parsePostgres reads a postgres:// DSN without connecting.
func parsePostgres(scheme, dsn string) (*pgx.ConnConfig, *url.URL, error) {
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(dsn, scheme+"://") {
		// Name the scheme only: url.Parse's error repeats the DSN, password and all.
		return nil, nil, fmt.Errorf("opening books: a %q DSN must be a URL, %s://USER:PASSWORD@HOST:PORT/DATABASE: %w", scheme, scheme, ErrUnsupportedDSN)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("opening books %s: %w: %w", u.Redacted(), ErrUnsupportedDSN, redact(err, u))
	}
	return cfg, u, nil
}

// refused says whether PostgreSQL turned the DSN itself down: its credentials (class 28:
// a wrong password, no such role, pg_hba), a database that does not exist (3D000), or a
// role without the privileges to open it (42501: no CONNECT, or tables missing that it
// may not create). Another try with the same DSN fares no better.
func refused(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (strings.HasPrefix(pg.Code, "28") || pg.Code == "3D000" || pg.Code == "42501")
}

// redact hides the DSN's password in err's text, which pgx's own errors redact
// only as best they can; errors.Is and errors.As still see err.
func redact(err error, u *url.URL) error {
	if pw, ok := u.User.Password(); ok && pw != "" {
		return redacted{err: err, password: pw}
	}
	return err
}

type redacted struct {
	err      error
	password string
}

func (r redacted) Error() string { return strings.ReplaceAll(r.err.Error(), r.password, "xxxxx") }

func (r redacted) Unwrap() error { return r.err }
