// Package ledgerapi is the ledger as an HTTP accounting service (services/ledger-api):
// the ledger_entries table of internal/books behind POST /v1/entries and
// GET /v1/entries/{key}, made idempotent by pkg/httpidem over a store in the same
// database.
//
// # Requests
//
// A POST carries one ledger entry as JSON, its members the columns of ledger_entries
// (run_id, invoice_no, line, kind, supplier_id, amount_paise, reverses, created_at); the
// entry's key is the Idempotency-Key header (a "key" member, if sent, must be the same).
// created_at defaults to the server's clock. The answer is the entry as the table holds
// it: 201 when the row was written, 200 when the key already held the same payload (a
// repeat after the key's window ended), and the middleware replays the first answer to a
// repeat within it.
//
// # Fencing
//
// Every POST carries the run's fencing token (Cairn-Run, Cairn-Fence-Token and, optionally,
// Cairn-Fence-Epoch; the epoch is "http" without it); one without is 428. The token is the ledger's own
// fence.Token: before the key is looked at, the ledger's fence of the run is raised to it
// (books.Ledger.RaiseFence), and a fence held by a higher token is 409 naming both
// tokens, with nothing claimed, replayed or written. books.Ledger.Post checks the fence
// again in the write's transaction; a newer token that arrived between the two checks
// answers 503, which releases the key, and the retry meets the 409. So a stale writer's
// refusal is never stored under a key that the run's new holder will send.
//
// # Errors
//
// Every error is an RFC 9457 problem (application/problem+json): the middleware's, and
// this package's Type constants. The ledger's own refusals (a reversal that is not the
// exact negation of its row, a row reversed already, a reversal of no row, a key holding
// another payload, an entry of another run than its token) are 422 naming the ledger's
// error in the "ledger_error" member.
package ledgerapi
