package sqlidem_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/cairnhq/cairn/internal/pgtest"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/retry"
	"github.com/cairnhq/cairn/pkg/sqlidem"
)

const (
	run   = "run-2026-10-13-ldh"
	epoch = "e7f3c1d2"
)

func token(v uint64) fence.Token { return fence.Token{RunID: run, Epoch: epoch, Value: v} }

// backend is one database the contract runs against. PostgreSQL is a real server
// (internal/pgtest), skipped only where none can be had and CI is unset.
type backend struct {
	name    string
	dialect fence.Dialect
	// open opens a new, empty database that lives as long as t; params are added to its
	// DSN (SQLite pragmas or PostgreSQL settings).
	open func(t *testing.T, params string) *sql.DB
}

const sqliteParams = "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"

var backends = []backend{
	{"sqlite", fence.SQLite, func(t *testing.T, params string) *sql.DB {
		return openDB(t, "sqlite", "file:"+filepath.Join(t.TempDir(), "job.db")+"?"+params)
	}},
	{"postgres", fence.Postgres, func(t *testing.T, params string) *sql.DB {
		dsn := pgtest.DSN(t)
		if params != "" {
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			dsn += sep + params
		}
		return openDB(t, "pgx", dsn)
	}},
}

func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("opening a %s database: %v", driver, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// bundle is a store under test and what the tests look at it through.
type bundle struct {
	store   *sqlidem.Store
	db      *sql.DB
	dialect fence.Dialect
}

// upload is the test's row shape: a record's score, and a note that is not part of the
// payload.
type upload struct {
	record string
	score  int64
	note   string
}

var uploadsTable = sqlidem.Table{
	Name: "uploads",
	Columns: []sqlidem.Column{
		{Name: "record", Type: "TEXT NOT NULL"}, {Name: "score", Type: "INTEGER NOT NULL"}, {Name: "note", Type: "TEXT NULL"},
	},
}

func (u upload) row(key string) sqlidem.Row {
	return sqlidem.Row{
		Key:     key,
		Payload: fmt.Appendf(nil, "record=%q score=%d", u.record, u.score),
		Values:  []any{u.record, u.score, u.note},
	}
}

func setup(t *testing.T, b backend, params string) bundle {
	t.Helper()
	db := b.open(t, params)
	s, err := sqlidem.New(db, b.dialect, uploadsTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(t.Context()); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return bundle{store: s, db: db, dialect: b.dialect}
}

func (b bundle) count(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.db.QueryRowContext(t.Context(), `SELECT count(*) FROM uploads`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b bundle) mustPut(t *testing.T, tok fence.Token, r sqlidem.Row) bool {
	t.Helper()
	inserted, err := b.store.Put(t.Context(), tok, r)
	if err != nil {
		t.Fatalf("Put(%s): %v", r.Key, err)
	}
	return inserted
}

// get reads the row under key back as an upload.
func (b bundle) get(t *testing.T, key string) (upload, string, bool) {
	t.Helper()
	var (
		u    upload
		note sql.NullString
	)
	digest, found, err := b.store.Get(t.Context(), key, &u.record, &u.score, &note)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	u.note = note.String
	return u, digest, found
}

func TestContract(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, b bundle)
	}{
		{"put inserts and get reads it back", contractPutInserts},
		{"a repeat is harmless", contractRepeat},
		{"another payload conflicts", contractConflict},
		{"a stale token writes nothing", contractStale},
		{"a foreign epoch writes nothing", contractForeignEpoch},
		{"a key outside the token's run writes nothing", contractOtherRun},
		{"a run's rows in byte order", contractListRun},
		{"insert in the job's own transaction", contractInsertInTx},
		{"create again", contractCreateAgain},
		{"values beyond 32 bits", contractWide},
		{"concurrent writers of the same keys", contractConcurrent},
		{"remove takes a row back, fenced, once", contractRemove},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		params := ""
		if b.dialect == fence.SQLite {
			params = sqliteParams
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				tt.run(t, setup(t, b, params))
			})
		}
	})
}

func contractPutInserts(t *testing.T, b bundle) {
	u := upload{record: "rec-0001", score: 42, note: "first"}
	r := u.row(run + ":rec-0001")
	if !b.mustPut(t, token(5), r) {
		t.Fatal("the first Put reported no insert")
	}
	got, digest, found := b.get(t, r.Key)
	if !found || got != u || digest != r.Digest() || digest != idempotency.Digest(r.Payload) {
		t.Fatalf("Get = %+v, %s, %t; want %+v, %s", got, digest, found, u, r.Digest())
	}
	if digest, found, err := b.store.Get(t.Context(), r.Key); err != nil || !found || digest != r.Digest() {
		t.Fatalf("Get of the digest alone = %s, %t, %v", digest, found, err)
	}
	if _, found, err := b.store.Get(t.Context(), run+":nope"); found || err != nil {
		t.Fatalf("Get of a missing key = %t, %v", found, err)
	}
	if _, _, err := b.store.Get(t.Context(), r.Key, new(string)); !errors.Is(err, sqlidem.ErrInvalid) {
		t.Fatalf("Get into one destination of three columns: %v, want ErrInvalid", err)
	}
}

func contractRepeat(t *testing.T, b bundle) {
	u := upload{record: "rec-0001", score: 42, note: "first"}
	b.mustPut(t, token(5), u.row(run+":rec-0001"))
	// A retry after a restart, under the run's next token; the note is not the payload.
	again := u
	again.note = "the retry's"
	if b.mustPut(t, token(9), again.row(run+":rec-0001")) {
		t.Fatal("the repeat reported an insert")
	}
	if n := b.count(t); n != 1 {
		t.Fatalf("%d rows after the repeat, want 1", n)
	}
	if got, _, _ := b.get(t, run+":rec-0001"); got != u {
		t.Fatalf("the row after the repeat is %+v, want the first %+v", got, u)
	}
}

func contractConflict(t *testing.T, b bundle) {
	u := upload{record: "rec-0001", score: 42}
	first := u.row(run + ":rec-0001")
	b.mustPut(t, token(5), first)
	changed := upload{record: "rec-0001", score: 43}.row(first.Key)
	inserted, err := b.store.Put(t.Context(), token(5), changed)
	if !errors.Is(err, idempotency.ErrConflict) || inserted {
		t.Fatalf("Put of another payload = %t, %v; want ErrConflict", inserted, err)
	}
	var c *idempotency.ConflictError
	if !errors.As(err, &c) || c.Key != first.Key || c.Stored != first.Digest() || c.New != changed.Digest() {
		t.Fatalf("conflict %+v, want key %s, stored %s, new %s", c, first.Key, first.Digest(), changed.Digest())
	}
	for _, want := range []string{first.Key, first.Digest(), changed.Digest()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	if retry.IsTemporary(err) {
		t.Errorf("a conflict is temporary: %v", err)
	}
	if n := b.count(t); n != 1 {
		t.Fatalf("%d rows after the conflict, want 1", n)
	}
	if got, digest, _ := b.get(t, first.Key); got != u || digest != first.Digest() {
		t.Fatalf("the row after the conflict is %+v (%s), want the first %+v", got, digest, u)
	}
}

func contractStale(t *testing.T, b bundle) {
	if err := b.store.RaiseFence(t.Context(), token(5)); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RaiseFence(t.Context(), token(9)); err != nil { // a newer holder
		t.Fatal(err)
	}
	if err := b.store.RaiseFence(t.Context(), token(5)); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("RaiseFence of the old token: %v, want ErrFenced", err)
	}
	inserted, err := b.store.Put(t.Context(), token(5), upload{record: "rec-0001", score: 42}.row(run+":rec-0001"))
	if !errors.Is(err, fence.ErrFenced) || inserted || retry.IsTemporary(err) {
		t.Fatalf("Put under the old token = %t, %v; want ErrFenced, not temporary", inserted, err)
	}
	if n := b.count(t); n != 0 {
		t.Fatalf("%d rows written by a stale token", n)
	}
	// The newer holder writes.
	if !b.mustPut(t, token(9), upload{record: "rec-0001", score: 42}.row(run+":rec-0001")) {
		t.Fatal("the newer holder's Put reported no insert")
	}
}

func contractForeignEpoch(t *testing.T, b bundle) {
	b.mustPut(t, token(5), upload{record: "rec-0001", score: 1}.row(run+":rec-0001"))
	foreign := token(50)
	foreign.Epoch = "0a0b0c0d"
	_, err := b.store.Put(t.Context(), foreign, upload{record: "rec-0002", score: 2}.row(run+":rec-0002"))
	if !errors.Is(err, fence.ErrForeignEpoch) {
		t.Fatalf("Put under another epoch: %v, want ErrForeignEpoch", err)
	}
	if n := b.count(t); n != 1 {
		t.Fatalf("%d rows, want the first only", n)
	}
}

func contractOtherRun(t *testing.T, b bundle) {
	for _, key := range []string{"run-other:rec-0001", run + "-x:rec-0001", run, "rec-0001"} {
		_, err := b.store.Put(t.Context(), token(5), upload{record: "rec-0001", score: 1}.row(key))
		if !errors.Is(err, sqlidem.ErrInvalid) || !strings.Contains(err.Error(), key) {
			t.Errorf("Put of key %q under run %q: %v, want ErrInvalid naming the key", key, run, err)
		}
	}
	bad := upload{record: "rec-0001"}.row(run + ":rec-0001")
	bad.Values = bad.Values[:2]
	if _, err := b.store.Put(t.Context(), token(5), bad); !errors.Is(err, sqlidem.ErrInvalid) {
		t.Errorf("Put of two values for three columns: %v, want ErrInvalid", err)
	}
	bad = upload{record: "rec-0001"}.row(run + ":rec-0001")
	bad.Payload = nil
	if _, err := b.store.Put(t.Context(), token(5), bad); !errors.Is(err, sqlidem.ErrInvalid) {
		t.Errorf("Put without a payload: %v, want ErrInvalid", err)
	}
	if n := b.count(t); n != 0 {
		t.Fatalf("%d rows written", n)
	}
}

func contractListRun(t *testing.T, b bundle) {
	// Byte order puts "Z" before "a" and "-" before "0"; a linguistic collation would not.
	keys := []string{run + ":b", run + ":Z", run + ":a-1", run + ":a", run + ":a0", run + ":é"}
	for i, k := range keys {
		b.mustPut(t, token(5), upload{record: k, score: int64(i)}.row(k))
	}
	// Another run's rows, one of whose ids starts with run's.
	other := fence.Token{RunID: run + "0", Epoch: epoch, Value: 5}
	b.mustPut(t, other, upload{record: "x"}.row(other.RunID+":a"))
	b.mustPut(t, fence.Token{RunID: "run", Epoch: epoch, Value: 5}, upload{record: "y"}.row("run:a"))

	rows, err := b.store.ListRun(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(keys)
	slices.Sort(want) // Go compares strings byte by byte
	var got []string
	for _, r := range rows {
		got = append(got, r.Key)
		if r.Values[0] != r.Key || r.Values[2] != "" {
			t.Errorf("row %s: values %q, want its record and an empty note", r.Key, r.Values)
		}
		if i := slices.Index(keys, r.Key); r.Values[1] != int64(i) || r.Digest != (upload{record: r.Key, score: int64(i)}.row(r.Key).Digest()) {
			t.Errorf("row %s: score %v (%T), digest %s", r.Key, r.Values[1], r.Values[1], r.Digest)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ListRun = %q, want %q", got, want)
	}
	if rows, err := b.store.ListRun(t.Context(), "run-none"); err != nil || len(rows) != 0 {
		t.Fatalf("ListRun of a run without rows = %v, %v", rows, err)
	}
	if _, err := b.store.ListRun(t.Context(), ""); !errors.Is(err, sqlidem.ErrInvalid) {
		t.Fatalf("ListRun of no run: %v, want ErrInvalid", err)
	}
}

// A job that changes another row with each keyed row does it in Insert's transaction,
// once: a repeat changes nothing, and a failure of its own statement takes the keyed row
// back with it.
func contractInsertInTx(t *testing.T, b bundle) {
	ctx := t.Context()
	if _, err := b.db.ExecContext(ctx, `CREATE TABLE totals(name TEXT PRIMARY KEY, total BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.ExecContext(ctx, `INSERT INTO totals(name, total) VALUES ('score', 0)`); err != nil {
		t.Fatal(err)
	}
	d := b.store.Table()
	if d.Key != "key" || d.Digest != "digest" || d.Fences != "fences" {
		t.Fatalf("defaults %+v", d)
	}
	add := func(u upload, key string, fail bool) (bool, error) {
		var inserted bool
		err := sqlidem.Write(ctx, b.db, b.dialect, func(tx *sql.Tx) error {
			var err error
			if inserted, err = b.store.Insert(ctx, tx, token(5), u.row(key)); err != nil || !inserted {
				return err
			}
			if fail {
				return errors.New("the job's own statement failed")
			}
			_, err = tx.ExecContext(ctx, b.dialect.Rebind(`UPDATE totals SET total = total + ? WHERE name = 'score'`), u.score)
			return err
		})
		return inserted, err
	}
	total := func() int64 {
		var n int64
		if err := b.db.QueryRowContext(ctx, `SELECT total FROM totals WHERE name = 'score'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if inserted, err := add(upload{record: "a", score: 7}, run+":a", false); err != nil || !inserted {
		t.Fatalf("first: %t, %v", inserted, err)
	}
	if inserted, err := add(upload{record: "a", score: 7}, run+":a", false); err != nil || inserted {
		t.Fatalf("repeat: %t, %v", inserted, err)
	}
	if _, err := add(upload{record: "b", score: 5}, run+":b", true); err == nil {
		t.Fatal("the failing transaction committed")
	}
	if got := total(); got != 7 {
		t.Fatalf("total %d, want 7 (once, and not the failed one's)", got)
	}
	if n := b.count(t); n != 1 {
		t.Fatalf("%d rows, want 1: the failed transaction's row stayed", n)
	}
}

func contractCreateAgain(t *testing.T, b bundle) {
	b.mustPut(t, token(5), upload{record: "a"}.row(run+":a"))
	if err := b.store.Create(t.Context()); err != nil {
		t.Fatalf("Create of existing tables: %v", err)
	}
	if n := b.count(t); n != 1 {
		t.Fatalf("%d rows after Create again, want 1", n)
	}
}

// Tokens are stream revisions and a job's numbers may be wide: every INTEGER holds 64 bits.
func contractWide(t *testing.T, b bundle) {
	tok := fence.Token{RunID: run, Epoch: epoch, Value: math.MaxInt64}
	u := upload{record: "a", score: math.MaxInt64}
	b.mustPut(t, tok, u.row(run+":a"))
	if got, _, _ := b.get(t, run+":a"); got != u {
		t.Fatalf("Get = %+v, want %+v", got, u)
	}
	if _, err := b.store.Put(t.Context(), fence.Token{RunID: run, Epoch: epoch, Value: math.MaxInt64 + 1}, u.row(run+":b")); !errors.Is(err, fence.ErrInvalidToken) {
		t.Fatalf("a token beyond 63 bits: %v, want fence.ErrInvalidToken", err)
	}
}

// Writers of the same keys at once, as two instances after a takeover race: each key is
// inserted once, every other write is a repeat, none fails.
func contractConcurrent(t *testing.T, b bundle) {
	const writers, keys = 4, 20
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		inserted = map[string]int{}
	)
	for w := range writers {
		wg.Go(func() {
			for k := range keys {
				key := fmt.Sprintf("%s:rec-%04d", run, (k+w*5)%keys)
				ok, err := b.store.Put(t.Context(), token(5), upload{record: key, score: 1}.row(key))
				if err != nil {
					t.Errorf("Put(%s): %v", key, err)
					return
				}
				if ok {
					mu.Lock()
					inserted[key]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for key, n := range inserted {
		if n != 1 {
			t.Errorf("%s inserted %d times", key, n)
		}
	}
	if len(inserted) != keys || b.count(t) != keys {
		t.Fatalf("%d keys inserted, %d rows; want %d", len(inserted), b.count(t), keys)
	}
}

func TestNewRefusesBadNames(t *testing.T) {
	t.Parallel()
	col := []sqlidem.Column{{Name: "record", Type: "TEXT"}}
	for _, tt := range []struct {
		name  string
		table sqlidem.Table
		says  string
	}{
		{"no name", sqlidem.Table{Columns: col}, `""`},
		{"a name that is SQL", sqlidem.Table{Name: "uploads; DROP TABLE x", Columns: col}, "DROP"},
		{"a column that is SQL", sqlidem.Table{Name: "uploads", Columns: []sqlidem.Column{{Name: "a b", Type: "TEXT"}}}, `"a b"`},
		{"a column named as the key", sqlidem.Table{Name: "uploads", Columns: []sqlidem.Column{{Name: "KEY", Type: "TEXT"}}}, `"KEY"`},
		{"a column named as the digest", sqlidem.Table{Name: "uploads", Digest: "sum", Columns: []sqlidem.Column{{Name: "sum", Type: "TEXT"}}}, `"sum"`},
		{"two columns of one name", sqlidem.Table{Name: "uploads", Columns: []sqlidem.Column{{Name: "a", Type: "TEXT"}, {Name: "a", Type: "TEXT"}}}, `"a"`},
		{"a fences table that is SQL", sqlidem.Table{Name: "uploads", Fences: "f-x", Columns: col}, `"f-x"`},
		{"the table is the fences table", sqlidem.Table{Name: "fences", Columns: col}, "fences"},
	} {
		if _, err := sqlidem.New(nil, fence.SQLite, tt.table); !errors.Is(err, sqlidem.ErrInvalid) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want ErrInvalid saying %s", tt.name, err, tt.says)
		}
	}
}

func TestCreateRefusesAColumnWithoutAType(t *testing.T) {
	t.Parallel()
	db := backends[0].open(t, sqliteParams)
	s, err := sqlidem.New(db, fence.SQLite, sqlidem.Table{Name: "uploads", Columns: []sqlidem.Column{{Name: "record"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(t.Context()); !errors.Is(err, sqlidem.ErrInvalid) || !strings.Contains(err.Error(), "record") {
		t.Fatalf("Create: %v, want ErrInvalid naming the column", err)
	}
}

func contractRemove(t *testing.T, b bundle) {
	ctx := t.Context()
	for _, rec := range []string{"rec-0001", "rec-0002"} {
		b.mustPut(t, token(5), upload{record: rec, score: 1}.row(run+":"+rec))
	}
	// The undo's token is above the step's: the step's writer is fenced from then on.
	if removed, err := b.store.Remove(ctx, token(7), run+":rec-0001"); err != nil || !removed {
		t.Fatalf("Remove = %t, %v; want the row removed", removed, err)
	}
	if removed, err := b.store.Remove(ctx, token(7), run+":rec-0001"); err != nil || removed {
		t.Fatalf("Remove again = %t, %v; want nothing removed, no error", removed, err)
	}
	if _, err := b.store.Put(ctx, token(5), upload{record: "rec-0001", score: 1}.row(run+":rec-0001")); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("the step's late write after the undo: %v, want fence.ErrFenced", err)
	}
	if _, err := b.store.Remove(ctx, token(6), run+":rec-0002"); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("a Remove under a stale token: %v, want fence.ErrFenced", err)
	}
	if _, err := b.store.Remove(ctx, token(7), "other-run:rec-0002"); !errors.Is(err, sqlidem.ErrInvalid) {
		t.Fatalf("a Remove outside the token's run: %v, want ErrInvalid", err)
	}
	if n := b.count(t); n != 1 {
		t.Fatalf("%d rows, want rec-0002 alone", n)
	}
}
