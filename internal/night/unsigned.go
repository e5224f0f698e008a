package night

import (
	"context"
	"fmt"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/fence"
)

// unsignedBook is the ledger over HTTP for a service that has no client of its own (no
// signer): every call fails naming it, rather than calling as another service.
type unsignedBook struct{ service string }

func (b unsignedBook) err() error {
	return fmt.Errorf("service %s has no signed client of the ledger's API (CAIRN_LEDGER_URL)", b.service)
}

func (b unsignedBook) RaiseFence(context.Context, fence.Token) error { return b.err() }

func (b unsignedBook) Post(context.Context, fence.Token, books.Entry) (bool, error) {
	return false, b.err()
}

func (b unsignedBook) Get(context.Context, string) (books.Entry, bool, error) {
	return books.Entry{}, false, b.err()
}

func (b unsignedBook) ListRun(context.Context, string) ([]books.Entry, error) { return nil, b.err() }

func (b unsignedBook) Reversal(context.Context, string, string) (books.Entry, error) {
	return books.Entry{}, b.err()
}
