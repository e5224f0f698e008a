package books

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/cairnhq/cairn/pkg/fence"
)

// openPostgres opens a postgres:// DSN through pgx's database/sql driver.
func openPostgres(ctx context.Context, scheme, dsn string) (*DB, error) {
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(dsn, scheme+"://") {
		// Name the scheme only: url.Parse's error repeats the DSN, password and all.
		return nil, fmt.Errorf("opening books: a %q DSN must be a URL, %s://USER:PASSWORD@HOST:PORT/DATABASE: %w", scheme, scheme, ErrUnsupportedDSN)
	}
	name := u.Redacted()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("opening books %s: %w: %w", name, ErrUnsupportedDSN, redact(err, u))
	}
	sqlDB := stdlib.OpenDB(*cfg)
	db := &DB{sql: sqlDB, dialect: fence.Postgres}
	if err := db.init(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("opening books %s: %w", name, redact(err, u))
	}
	return db, nil
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
