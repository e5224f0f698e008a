// Package books is Cairn's side of the company's outside systems: the ledger
// and the stock store, SQL databases written only through keyed, fenced writes
// (DESIGN.md, "The outside systems").
//
// Every write is one transaction: the fence check ([fence.Hold] in the
// transaction), then the insert under the write's idempotency key. A key that
// already holds the same payload is a no-op that changes nothing else; a key
// that holds another payload is [ErrConflict], naming both. A stock adjustment
// changes stock_levels in the same transaction, and only when it was inserted.
//
// The tables are a contract, the same in SQLite and PostgreSQL. Only SQLite is
// implemented: it is opened in WAL mode with a busy timeout, foreign keys on,
// and write transactions that begin IMMEDIATE, so two processes posting the
// same keys queue on the write lock instead of failing with SQLITE_BUSY.
// Queries are written with ? placeholders and rebound for another dialect.
//
// Shadow runs use the shadow_ copies of every table, selected by the shadow
// flag of [DB.Ledger] and [DB.Stock].
package books
