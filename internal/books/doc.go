// Package books is Cairn's side of the company's outside systems: the ledger
// and the stock store, SQL databases written only through keyed, fenced writes
// (DESIGN.md, "The outside systems").
//
// Every write is one transaction ([sqlidem.Write]): the fence check ([fence.Hold] in the
// transaction), then the insert under the write's idempotency key. A key that
// already holds the same payload is a no-op that changes nothing else; a key
// that holds another payload is [ErrConflict], naming both. A stock adjustment
// changes stock_levels in the same transaction, and only when it was inserted.
// The database's transient errors are temporary by [sqlidem.Transient], the one
// decision every SQL store of Cairn shares.
//
// The keyed insert is this package's own rather than a [sqlidem.Store]'s: the
// contract's tables keep no digest column, so a repeat is told from a conflict by
// comparing the stored row's payload columns (every column but key and created_at),
// and a conflict names the columns that differ beside both digests.
//
// The tables are a contract, the same in SQLite and PostgreSQL, and one contract
// suite runs against both. Queries are written with ? placeholders and rebound
// for PostgreSQL.
//
// # SQLite
//
// "sqlite:PATH" is opened in WAL mode with a busy timeout, foreign keys on, and
// write transactions that begin IMMEDIATE, so two processes posting the same
// keys queue on the write lock instead of failing with SQLITE_BUSY.
//
// # PostgreSQL
//
// "postgres://..." is opened through pgx's database/sql driver. What differs:
//
//   - Every INTEGER of the contract is a BIGINT, as wide as SQLite's: tokens are
//     stream revisions, and amounts in paise outgrow 32 bits.
//   - Lists are ordered by key COLLATE "C", the byte order SQLite uses, whatever
//     collation the database sorts by.
//   - Writes run under READ COMMITTED. The fence upsert (GREATEST for max) takes
//     the run's fence row lock first, so the writes of one run queue behind each
//     other; an insert whose key another transaction committed meanwhile does
//     nothing (ON CONFLICT DO NOTHING) and the next statement reads that row:
//     the same payload is a no-op, another is [ErrConflict], never a unique-key
//     error from the database.
//   - Open creates the tables under an advisory lock, so processes that start
//     together do not collide in PostgreSQL's catalogue.
//
// Shadow runs use the shadow_ copies of every table, selected by the shadow
// flag of [DB.Ledger] and [DB.Stock].
package books
