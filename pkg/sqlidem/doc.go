// Package sqlidem makes a job's writes to a SQL table it owns keyed and fenced: each row is
// written once under its idempotency key, and only by the holder of the run's lease. It is
// the SQL counterpart of package httpidem, on SQLite (modernc.org/sqlite) and PostgreSQL
// (pgx's database/sql driver).
//
// The smallest complete use:
//
//	uploads, err := sqlidem.New(db, fence.SQLite, sqlidem.Table{
//		Name:    "uploads",
//		Columns: []sqlidem.Column{{Name: "record", Type: "TEXT NOT NULL"}, {Name: "score", Type: "INTEGER NOT NULL"}},
//	})
//	err = uploads.Create(ctx)
//	err = uploads.RaiseFence(ctx, tok) // right after taking the run's lease
//	inserted, err := uploads.Put(ctx, tok, sqlidem.Row{
//		Key:     "run-7:rec-0001",
//		Payload: []byte(`{"record":"rec-0001","score":42}`),
//		Values:  []any{"rec-0001", 42},
//	})
//
// # The model
//
// The job names its table and its own columns ([Table]); the package adds two: the key,
// the table's primary key, and the digest of the row's payload. A [Row] is the key (built
// from ids only, "<run>:...", see package idempotency), the payload (the bytes the job says
// stand for what the row says, times and attempts left out) and the column values.
// [Store.Put] writes it in one transaction:
//
//  1. the fence check ([fence.Hold] inside the transaction, before the write): a token below
//     the run's fence is fence.ErrFenced, another epoch fence.ErrForeignEpoch, and the
//     transaction is rolled back;
//  2. INSERT ... ON CONFLICT(key) DO NOTHING;
//  3. when nothing was inserted, a read of the digest the key holds: the same digest is a
//     harmless repeat (Put reports false, nothing changes); another is an
//     [idempotency.ConflictError] naming the key and both digests, which the step runner
//     hands to a person.
//
// A row's key must start with its token's run ("<run>:"): a run's fence guards that run's
// rows only, and [Store.ListRun] finds a run's rows by that prefix.
//
// A job that changes other rows with the write (a balance, a level) runs [Store.Insert] in
// a transaction of [Write] and acts on its inserted result, so that the change is made
// once, in the same commit as the keyed row.
//
// # Verify
//
// [Store.Get] reads a row back by key, with the digest it was written with; [Row.Digest] is
// the digest a row the step meant to write would have. [Store.ListRun] lists every row of a
// run in key order, byte by byte on either database.
//
// # What is temporary
//
// [Transient] is the one place Cairn decides which database errors a later try may not
// meet: SQLite's SQLITE_BUSY and SQLITE_LOCKED; PostgreSQL's serialization failure (40001),
// deadlock (40P01), lock timeout (55P03), shutdowns (57P01, 57P02, 57P03), too many
// connections (53300) and connection exceptions (class 08); and a connection lost under the
// driver. It marks them with retry.ErrTemporary, so errors.Is(err, retry.ErrTemporary)
// holds and the step runner tries again. Every error of a [Store] and of [Write] goes
// through it. Trying a keyed write again is safe even when its commit's answer was lost:
// the retry finds its row and reports it already there.
//
// # Databases
//
// Open SQLite with a busy timeout, WAL, and write transactions that take the write lock when
// they begin:
//
//	file:PATH?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate
//
// so that concurrent writers queue on the lock instead of failing with SQLITE_BUSY (which is
// still temporary when the timeout runs out). On PostgreSQL, [Write] runs under READ
// COMMITTED: the fence upsert takes the run's fence row lock first, so the writes of a run
// queue behind each other, and an insert whose key another transaction committed meanwhile
// does nothing and reads that row. On PostgreSQL every INTEGER that [Store.Create] creates
// is a BIGINT.
package sqlidem
