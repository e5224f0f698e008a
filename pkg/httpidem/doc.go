// Package httpidem makes HTTP handlers idempotent with the Idempotency-Key header of
// draft-ietf-httpapi-idempotency-key-header-07 (Stripe's API works the same way), and
// fences stale clients out with a run's fencing token.
//
// # The model
//
// A client sends each unsafe request (POST and PATCH by default) with a key of its
// choosing, the same key on every retry of the same operation:
//
//	POST /v1/entries
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// [Middleware.Wrap] claims the key in a [Store] before the handler runs, with the
// request's fingerprint: "sha256:<hex>" of the method, the request URI (path and query),
// any headers chosen with [WithFingerprintHeaders], and the body. Then:
//
//   - a key not seen (or past its expiry window, 24h by default) is claimed: the handler
//     runs once, its answer is recorded, and status, the chosen headers and body are
//     stored as the key's answer;
//   - a repeat with the same fingerprint gets the stored answer byte for byte, with the
//     header Idempotent-Replayed: true, and the handler does not run;
//   - a repeat while the first is still in flight gets 409 (the client retries later);
//   - a repeat with another fingerprint gets 422 naming the key, whether the first is
//     done or still in flight: the key was reused for another operation.
//
// A handler that panics or answers 5xx releases its claim, so the client's retry runs it
// again; a 2xx or 4xx answer is stored, since the draft treats the first answer as the
// outcome of the operation and a 4xx retried unchanged would fail the same way. A claim
// in flight whose server dies stays in flight until the key's window ends.
//
// # Keys
//
// The draft makes the field an RFC 8941 sf-string (quoted, printable ASCII, with \" and
// \\ escapes). [ParseKey] accepts that, and for compatibility a bare key of visible ASCII
// without quotes, commas or semicolons, as Stripe's clients send. Keys are at most
// [MaxKeyLen] bytes (a limit of this package's, not the draft's). A missing key passes
// through untouched unless [WithKeyRequired], which answers 400 as the draft allows; a
// malformed or repeated field answers 400. Keys share one space per store unless [WithScope]
// names the client of each request, which makes the same key from two clients two keys.
//
// # Fencing
//
// The draft says nothing about fencing: this is Cairn's addition. A client that is a step
// of a durable run sends the run id and the fencing token of its lease (Cairn-Run and
// Cairn-Fence-Token by default, see [WithFenceHeaders]). In the transaction that claims
// the key, the store raises the run's highest seen token to the request's (never
// lowers it); a token below it means a newer holder of the run has already been heard, and
// the request is refused with 409 and a problem naming the run, both tokens and the key,
// before the handler runs and before any key is claimed or replayed. A request without
// the headers is not fenced. Tokens are compared within a run only, with no epoch.
//
// # Who calls
//
// [Authenticate] is a middleware that lets through only requests signed by a service
// whose ed25519 key is registered in cairn-keys (an identity.Ring). The client signs with
// its service's own seed ([Sign], or [ClientConfig.Signer]): Cairn-Caller names the
// service, Cairn-Signed-At the time (RFC 3339), and Cairn-Signature is the signature, in
// the domain identity.DomainHTTP, of the method, the request URI (path and query), the
// time, the caller and the headers [SignedHeaders] names (Idempotency-Key,
// Content-Digest, the fencing headers) plus any the server and the client agree on. A
// request signed more than the skew (5 min by default) away from the server's clock, by a
// key not registered under its name, or whose signed parts changed, is 401; a write must
// carry Content-Digest, which is checked against its body (400). [CallerOf] is then the
// caller, and [Allow] answers 403 to a caller a route does not name.
//
// The idempotency middleware checks a Content-Digest whenever one is sent (400 on a
// mismatch, nothing claimed), and the run header is part of every fingerprint: the same
// key and body under another run's headers is 422, never the first run's answer.
//
// # Errors
//
// Every refusal is an RFC 9457 problem details body (application/problem+json, see
// [Problem]) with one of the Type constants and extension members: "key" on every
// key-related problem, "run", "token" and "highest" when fenced, "max_length" on a bad
// key. A store that cannot be reached answers 503.
//
// # Stores
//
// [SQLStore] keeps keys and fences in two tables of a SQLite database (modernc.org/sqlite,
// [NewSQLiteStore]) or a PostgreSQL one (pgx's database/sql driver, [NewPostgresStore]),
// so that a service may keep them next to the data its handlers write. Claims are
// atomic: INSERT ... ON CONFLICT DO NOTHING, then a read, in one transaction after the
// fence upsert. The answer is stored after the handler returns, not in the handler's own
// transaction: a crash between the two leaves the key in flight until it expires, unless
// [WithRecovery] reads the effect back and answers from it. A handler with a fence of its
// own (with an epoch, say) uses [WithoutFence].
//
// # The client side
//
// [Client.Write] makes one keyed write to an API with this middleware (or any API of the
// draft's): Idempotency-Key with the effect's key, Cairn-Run and Cairn-Fence-Token with
// the run's lease, and Content-Digest (sha-256 of the body). A step records the intent
// before the call and the receipt after through [ClientConfig.OnIntent] and
// [ClientConfig.OnReceipt] (package saga: its
// System HTTP and saga.WithReceipt). The answer is
// classed ([Error]):
//
//   - 2xx: done, a [Receipt] of status, the provider's reference (the Location header,
//     else the JSON body's "id"), the answer's digest, and Replayed;
//   - 409 of type TypeFenced: [ErrFenced], the caller is a zombie and stops;
//     another 409: [ErrInFlight], retried later;
//   - 422: [ErrKeyConflict], an *idempotency.ConflictError naming the key: hand over;
//   - 429, or 503 with Retry-After: waited out as told (up to MaxRetryAfter) and sent
//     again through the shared limit; past that, [ErrRateLimited] with the wait. With a
//     [ClientConfig.Limiter] the wait is held in the shared limit (ratelimit's
//     Limiter.Hold), so that every instance sharing it waits the Retry-After out, the
//     retry's own slot included; without one, or when the hold is refused (longer than
//     ratelimit.MaxHold) or fails, the client waits alone on [ClientConfig.After];
//   - other 5xx, refused or reset connections, timeouts: [ErrTemporary];
//   - other 4xx (and 3xx, never followed): [ErrRejected] with the server's [Problem].
//
// An answer lost after the request was written (a reset, a timeout, a body cut short)
// is settled before Write returns by a lookup: the same request again, which the
// middleware answers from its store, or a GET of [ClientConfig.LookupURL] (404: the write
// did not land). The lookup's outcome is the write's; only a failed lookup is
// ErrTemporary, and a later write with the same key is still safe.
package httpidem
