package ledgerapi

import (
	"context"
	"net/http"
)

// HandlerWithHook is Handler with beforeWrite run in each POST just before the ledger's write.
func HandlerWithHook(c Config, beforeWrite func(context.Context)) (http.Handler, error) {
	return handler(c, beforeWrite)
}
