package ledgerapi

import "net/http"

// Hooks run in each POST around the ledger's write.
type Hooks = hooks

// HandlerWithHooks is Handler with hooks.
func HandlerWithHooks(c Config, h Hooks) (http.Handler, error) { return handler(c, h) }
