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
// # Callers
//
// Every request is signed by the calling service with its own key (httpidem.Sign, the
// seed it signs its records with) and checked against the keys registered in cairn-keys
// (httpidem.Authenticate over Config.Ring): not signed, out of the skew window, or signed
// by no registered key is 401. Each route is its callers' (Roles, default DefaultRoles):
// post-ledger posts any entry, the compensator only reversals, both raise fences and read
// entries; any other service is 403. A caller is checked, and a compensator's entry is
// checked to be a reversal, before the fence is raised or the key looked at: a 401 or 403
// changes nothing. An entry of another run than its fencing headers is 422 at the same
// point.
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
// refusal is never stored under a key that the run's new holder will send. The
// middleware keeps no fence of its own (httpidem.WithoutFence): the ledger's holds the
// epoch, which `cairn fences adopt` moves, and one fence guards the SQL path and this one.
//
// # A crash between the write and its answer
//
// A key whose server died after the ledger's write and before the middleware stored the
// answer is in flight; a retry of the same request is answered from the row under the key
// (httpidem.WithRecovery): 201 with the row, stored as the key's answer.
//
// # Errors
//
// Every error is an RFC 9457 problem (application/problem+json): the middleware's, and
// this package's Type constants. The ledger's own refusals (a reversal that is not the
// exact negation of its row, a row reversed already, a reversal of no row, a key holding
// another payload, an entry of another run than its token) are 422 naming the ledger's
// error in the "ledger_error" member.
package ledgerapi
