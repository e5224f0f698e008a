package httpidem

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/cairnhq/cairn/pkg/fence"
)

// SQLStore is a [Store] over database/sql. Its tables:
//
//	http_idempotency_keys(key TEXT PRIMARY KEY, claim TEXT, fingerprint TEXT,
//	  state TEXT ('in_flight' | 'done'), status INTEGER, headers TEXT (JSON), body BLOB,
//	  created_at BIGINT, expires_at BIGINT)   -- times in Unix nanoseconds
//	http_fence_tokens(run TEXT PRIMARY KEY, token BIGINT)
type SQLStore struct {
	db       *sql.DB
	postgres bool
}

// NewSQLiteStore is the store on a SQLite database opened with the "sqlite" driver of
// modernc.org/sqlite. Open it with a busy timeout (e.g. _pragma=busy_timeout(10000)) so
// that concurrent claims wait for the write lock rather than fail, and WAL mode.
func NewSQLiteStore(db *sql.DB) *SQLStore { return &SQLStore{db: db} }

// NewPostgresStore is the store on a PostgreSQL database opened with pgx's database/sql
// driver (github.com/jackc/pgx/v5/stdlib).
func NewPostgresStore(db *sql.DB) *SQLStore { return &SQLStore{db: db, postgres: true} }

// CreateTables creates the store's tables if they do not exist.
func (s *SQLStore) CreateTables(ctx context.Context) error {
	blob := "BLOB"
	if s.postgres {
		blob = "BYTEA"
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS http_idempotency_keys(
			key TEXT PRIMARY KEY,
			claim TEXT NOT NULL,
			fingerprint TEXT NOT NULL,
			state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
			status INTEGER NOT NULL DEFAULT 0,
			headers TEXT NOT NULL DEFAULT '{}',
			body ` + blob + `,
			created_at BIGINT NOT NULL,
			expires_at BIGINT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS http_fence_tokens(run TEXT PRIMARY KEY, token BIGINT NOT NULL)`,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("creating idempotency tables: %w", err)
		}
	}
	return nil
}

// q turns the ? placeholders of query into $n on PostgreSQL.
func (s *SQLStore) q(query string) string {
	if s.postgres {
		return fence.Postgres.Rebind(query)
	}
	return query
}

// Claim implements [Store]. Every statement before the read is a write, so that on
// SQLite the transaction takes the write lock first and never has to upgrade a read
// lock; on PostgreSQL the fence upsert locks the run's row and the insert waits for any
// concurrent claim of the same key to commit.
func (s *SQLStore) Claim(ctx context.Context, c Claim) (Outcome, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Outcome{}, fmt.Errorf("claiming key %q: %w", c.Key, err)
	}
	defer tx.Rollback()
	out, err := s.claim(ctx, tx, c)
	if err != nil {
		return Outcome{}, fmt.Errorf("claiming key %q: %w", c.Key, err)
	}
	if err := tx.Commit(); err != nil {
		return Outcome{}, fmt.Errorf("claiming key %q: %w", c.Key, err)
	}
	return out, nil
}

func (s *SQLStore) claim(ctx context.Context, tx *sql.Tx, c Claim) (Outcome, error) {
	if c.Fenced {
		var highest int64
		err := tx.QueryRowContext(ctx, s.q(`INSERT INTO http_fence_tokens(run, token) VALUES (?, ?)
			ON CONFLICT(run) DO UPDATE SET token = CASE WHEN excluded.token > http_fence_tokens.token
				THEN excluded.token ELSE http_fence_tokens.token END
			RETURNING token`), c.Run, c.Token).Scan(&highest)
		if err != nil {
			return Outcome{}, fmt.Errorf("raising the fence of run %q: %w", c.Run, err)
		}
		if highest > c.Token {
			return Outcome{State: FencedOut, Highest: highest}, nil
		}
	}
	now := c.Now.UnixNano()
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM http_idempotency_keys WHERE key = ? AND expires_at <= ?`), c.Key, now); err != nil {
		return Outcome{}, fmt.Errorf("dropping the expired key: %w", err)
	}
	res, err := tx.ExecContext(ctx, s.q(`INSERT INTO http_idempotency_keys(key, claim, fingerprint, state, created_at, expires_at)
		VALUES (?, ?, ?, 'in_flight', ?, ?) ON CONFLICT(key) DO NOTHING`),
		c.Key, c.ID, c.Fingerprint, now, c.Expires.UnixNano())
	if err != nil {
		return Outcome{}, fmt.Errorf("inserting the key: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Outcome{}, fmt.Errorf("inserting the key: %w", err)
	} else if n == 1 {
		return Outcome{State: Claimed}, nil
	}
	var (
		out     Outcome
		state   string
		headers string
	)
	err = tx.QueryRowContext(ctx, s.q(`SELECT claim, fingerprint, state, status, headers, body FROM http_idempotency_keys WHERE key = ?`), c.Key).
		Scan(&out.Claim, &out.Fingerprint, &state, &out.Answer.Status, &headers, &out.Answer.Body)
	if errors.Is(err, sql.ErrNoRows) {
		// Only a Release between the insert and the read on a database that reads
		// outside the insert's snapshot gets here: the client may retry.
		return Outcome{State: InFlight}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("reading the key: %w", err)
	}
	if state != "done" {
		return Outcome{State: InFlight, Fingerprint: out.Fingerprint, Claim: out.Claim}, nil
	}
	out.State, out.Claim = Done, ""
	if err := json.Unmarshal([]byte(headers), &out.Answer.Header); err != nil {
		return Outcome{}, fmt.Errorf("reading the stored headers: %w", err)
	}
	if out.Answer.Body == nil {
		out.Answer.Body = []byte{}
	}
	return out, nil
}

// Complete implements [Store].
func (s *SQLStore) Complete(ctx context.Context, c Claim, a Answer) error {
	h := a.Header
	if h == nil {
		h = http.Header{}
	}
	headers, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("storing the answer of key %q: %w", c.Key, err)
	}
	body := a.Body
	if body == nil {
		body = []byte{}
	}
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE http_idempotency_keys SET state = 'done', status = ?, headers = ?, body = ?
		WHERE key = ? AND claim = ? AND state = 'in_flight'`), a.Status, string(headers), body, c.Key, c.ID)
	if err != nil {
		return fmt.Errorf("storing the answer of key %q: %w", c.Key, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("storing the answer of key %q: %w", c.Key, err)
	} else if n != 1 {
		return fmt.Errorf("storing the answer of key %q: %w", c.Key, ErrClaimLost)
	}
	return nil
}

// Release implements [Store].
func (s *SQLStore) Release(ctx context.Context, c Claim) error {
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM http_idempotency_keys WHERE key = ? AND claim = ? AND state = 'in_flight'`), c.Key, c.ID); err != nil {
		return fmt.Errorf("releasing key %q: %w", c.Key, err)
	}
	return nil
}
