package fence

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	for _, stmt := range []string{Schema, `CREATE TABLE writes(k TEXT PRIMARY KEY)`} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("creating schema: %v", err)
		}
	}
	return db
}

type row struct {
	Epoch string
	Token int64
}

func fenceRow(t *testing.T, db *sql.DB, table, run string) (row, bool) {
	t.Helper()
	var r row
	err := db.QueryRowContext(t.Context(), "SELECT epoch, token FROM "+table+" WHERE run_id = ?", run).Scan(&r.Epoch, &r.Token)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false
	}
	if err != nil {
		t.Fatalf("reading fence of %q: %v", run, err)
	}
	return r, true
}

func TestHold(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		before  []Token // raised in order, each must succeed
		hold    Token
		wantErr error
		want    row // the fence after hold
	}{
		{
			name: "first raise inserts",
			hold: Token{RunID: "run-1", Epoch: "e1", Value: 10},
			want: row{"e1", 10},
		},
		{
			name:   "higher token raises",
			before: []Token{{RunID: "run-1", Epoch: "e1", Value: 10}},
			hold:   Token{RunID: "run-1", Epoch: "e1", Value: 25},
			want:   row{"e1", 25},
		},
		{
			name:   "same token checks",
			before: []Token{{RunID: "run-1", Epoch: "e1", Value: 10}},
			hold:   Token{RunID: "run-1", Epoch: "e1", Value: 10},
			want:   row{"e1", 10},
		},
		{
			name:    "lower token is fenced",
			before:  []Token{{RunID: "run-1", Epoch: "e1", Value: 25}},
			hold:    Token{RunID: "run-1", Epoch: "e1", Value: 10},
			wantErr: ErrFenced,
			want:    row{"e1", 25},
		},
		{
			name:    "another epoch is foreign, even with a higher token",
			before:  []Token{{RunID: "run-1", Epoch: "e1", Value: 25}},
			hold:    Token{RunID: "run-1", Epoch: "e2", Value: 900},
			wantErr: ErrForeignEpoch,
			want:    row{"e1", 25},
		},
		{
			name:   "runs are fenced apart",
			before: []Token{{RunID: "run-2", Epoch: "e1", Value: 99}},
			hold:   Token{RunID: "run-1", Epoch: "e1", Value: 3},
			want:   row{"e1", 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := openDB(t)
			for _, b := range tt.before {
				if err := Hold(t.Context(), db, SQLite, "fences", b); err != nil {
					t.Fatalf("raising %+v: %v", b, err)
				}
			}
			err := Hold(t.Context(), db, SQLite, "fences", tt.hold)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Hold(%+v) = %v, want %v", tt.hold, err, tt.wantErr)
			}
			got, ok := fenceRow(t, db, "fences", tt.hold.RunID)
			if !ok || got != tt.want {
				t.Fatalf("fence after Hold = %+v (present %v), want %+v", got, ok, tt.want)
			}
		})
	}
}

func TestHoldErrorNamesBothSides(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := t.Context()
	if err := Hold(ctx, db, SQLite, "fences", Token{RunID: "run-1", Epoch: "e1", Value: 1876}); err != nil {
		t.Fatal(err)
	}
	err := Hold(ctx, db, SQLite, "fences", Token{RunID: "run-1", Epoch: "e1", Value: 1202})
	for _, want := range []string{"1876", "1202", "run-1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fenced error %v does not name %q", err, want)
		}
	}
	err = Hold(ctx, db, SQLite, "fences", Token{RunID: "run-1", Epoch: "f9", Value: 2000})
	for _, want := range []string{`"e1"`, `"f9"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("foreign epoch error %v does not name %s", err, want)
		}
	}
}

// write is one fenced write: the fence check and the insert in one transaction.
func write(ctx context.Context, db *sql.DB, tok Token, key string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := Hold(ctx, tx, SQLite, "fences", tok); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO writes(k) VALUES (?)", key); err != nil {
		return err
	}
	return tx.Commit()
}

func TestStaleWriterIsRefused(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := t.Context()
	old := Token{RunID: "run-1", Epoch: "e1", Value: 5}
	newer := Token{RunID: "run-1", Epoch: "e1", Value: 7}

	if err := Hold(ctx, db, SQLite, "fences", old); err != nil {
		t.Fatalf("old holder raising: %v", err)
	}
	if err := write(ctx, db, old, "a"); err != nil {
		t.Fatalf("old holder writing before the takeover: %v", err)
	}
	if err := Hold(ctx, db, SQLite, "fences", newer); err != nil {
		t.Fatalf("new holder raising: %v", err)
	}
	if err := write(ctx, db, old, "b"); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale write = %v, want ErrFenced", err)
	}
	if err := write(ctx, db, newer, "c"); err != nil {
		t.Fatalf("new holder writing: %v", err)
	}

	var keys []string
	rows, err := db.QueryContext(ctx, "SELECT k FROM writes ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys, ","); got != "a,c" {
		t.Fatalf("written keys = %q, want \"a,c\" (the stale write must leave nothing)", got)
	}
	if got, _ := fenceRow(t, db, "fences", "run-1"); got != (row{"e1", 7}) {
		t.Fatalf("fence = %+v, want e1/7", got)
	}
}

func TestAdopt(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := t.Context()
	oldEpoch := Token{RunID: "run-1", Epoch: "e1", Value: 1876}
	if err := Hold(ctx, db, SQLite, "fences", oldEpoch); err != nil {
		t.Fatal(err)
	}
	// NATS storage replaced: revisions restart, the epoch changes.
	adopted := Token{RunID: "run-1", Epoch: "e2", Value: 4}
	if err := Hold(ctx, db, SQLite, "fences", adopted); !errors.Is(err, ErrForeignEpoch) {
		t.Fatalf("Hold under the new epoch before adopting = %v, want ErrForeignEpoch", err)
	}
	if err := Adopt(ctx, db, SQLite, "fences", adopted); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if got, _ := fenceRow(t, db, "fences", "run-1"); got != (row{"e2", 4}) {
		t.Fatalf("fence after adopt = %+v, want e2/4", got)
	}
	if err := Hold(ctx, db, SQLite, "fences", Token{RunID: "run-1", Epoch: "e2", Value: 6}); err != nil {
		t.Fatalf("Hold under the adopted epoch: %v", err)
	}
	if err := Hold(ctx, db, SQLite, "fences", oldEpoch); !errors.Is(err, ErrForeignEpoch) {
		t.Fatalf("Hold under the old epoch after adopting = %v, want ErrForeignEpoch", err)
	}
	// Within one epoch, adopting never lowers the fence.
	if err := Adopt(ctx, db, SQLite, "fences", adopted); !errors.Is(err, ErrFenced) {
		t.Fatalf("Adopt of a lower token in the same epoch = %v, want ErrFenced", err)
	}
	if got, _ := fenceRow(t, db, "fences", "run-1"); got != (row{"e2", 6}) {
		t.Fatalf("fence after refused adopt = %+v, want e2/6", got)
	}
	// Adopting a run with no fence yet creates it.
	if err := Adopt(ctx, db, SQLite, "fences", Token{RunID: "run-9", Epoch: "e2", Value: 1}); err != nil {
		t.Fatalf("Adopt of an unfenced run: %v", err)
	}
}

func TestOtherTable(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, strings.Replace(Schema, "fences(", "shadow_fences(", 1)); err != nil {
		t.Fatal(err)
	}
	if err := Hold(ctx, db, SQLite, "shadow_fences", Token{RunID: "run-1", Epoch: "e1", Value: 9}); err != nil {
		t.Fatal(err)
	}
	if _, ok := fenceRow(t, db, "fences", "run-1"); ok {
		t.Fatal("holding shadow_fences wrote to fences")
	}
	if got, _ := fenceRow(t, db, "shadow_fences", "run-1"); got != (row{"e1", 9}) {
		t.Fatalf("shadow fence = %+v, want e1/9", got)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	good := Token{RunID: "run-1", Epoch: "e1", Value: 1}
	tests := []struct {
		name    string
		table   string
		tok     Token
		wantErr error
	}{
		{"empty run", "fences", Token{Epoch: "e1", Value: 1}, ErrInvalidToken},
		{"empty epoch", "fences", Token{RunID: "run-1", Value: 1}, ErrInvalidToken},
		{"token beyond int64", "fences", Token{RunID: "run-1", Epoch: "e1", Value: 1 << 63}, ErrInvalidToken},
		{"injected table", "fences; DROP TABLE writes", good, ErrInvalidTable},
		{"empty table", "", good, ErrInvalidTable},
		{"leading digit", "1fences", good, ErrInvalidTable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Hold(t.Context(), db, SQLite, tt.table, tt.tok); !errors.Is(err, tt.wantErr) {
				t.Errorf("Hold = %v, want %v", err, tt.wantErr)
			}
			if err := Adopt(t.Context(), db, SQLite, tt.table, tt.tok); !errors.Is(err, tt.wantErr) {
				t.Errorf("Adopt = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestPostgresSpelling(t *testing.T) {
	t.Parallel()
	for _, build := range []func(Dialect, string) (string, error){holdQuery, adoptQuery} {
		pg, err := build(Postgres, "fences")
		if err != nil {
			t.Fatal(err)
		}
		lite, err := build(SQLite, "fences")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(pg, "GREATEST(fences.token, excluded.token)") || !strings.Contains(pg, "VALUES ($1, $2, $3)") {
			t.Errorf("postgres query %q lacks GREATEST or $n placeholders", pg)
		}
		if !strings.Contains(lite, "max(fences.token, excluded.token)") || !strings.Contains(lite, "VALUES (?, ?, ?)") {
			t.Errorf("sqlite query %q lacks max or ? placeholders", lite)
		}
	}
}
