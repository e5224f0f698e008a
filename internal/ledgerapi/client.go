package ledgerapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/saga"
)

// ClientConfig is how a [Client] reaches the ledger's API.
type ClientConfig struct {
	URL         string            // http://HOST:PORT of services/ledger-api (CAIRN_LEDGER_URL)
	Transport   http.RoundTripper // nil: a clone of http.DefaultTransport
	CallTimeout time.Duration     // one call's bound (default httpidem.DefaultCallTimeout)
	Limiter     *ratelimit.Limiter
}

// Client is the ledger over HTTP: post-ledger and the compensator write through its
// [Client.Ledger] as they would through the ledger database.
type Client struct {
	cfg ClientConfig
}

// NewClient is a client of the API at c.URL.
func NewClient(c ClientConfig) (*Client, error) {
	if c.URL == "" {
		return nil, errors.New("ledgerapi client: no URL")
	}
	return &Client{cfg: c}, nil
}

// Ledger is the ledger (shadow: its shadow tables) as a books.Book.
func (c *Client) Ledger(shadow bool) *Book { return &Book{c: c, shadow: shadow} }

// Book is one of the API's ledgers (live or shadow); it implements books.Book.
type Book struct {
	c      *Client
	shadow bool
}

var _ books.Book = (*Book)(nil)

func (b *Book) RaiseFence(ctx context.Context, t fence.Token) error { return errors.ErrUnsupported }

func (b *Book) Post(ctx context.Context, t fence.Token, e books.Entry) (bool, error) {
	ins, _, err := b.PostReceipt(ctx, t, e)
	return ins, err
}

// PostReceipt is Post with the receipt of the write, for its saga outcome.
func (b *Book) PostReceipt(ctx context.Context, t fence.Token, e books.Entry) (bool, saga.Receipt, error) {
	return false, saga.Receipt{}, errors.ErrUnsupported
}

func (b *Book) Get(ctx context.Context, key string) (books.Entry, bool, error) {
	return books.Entry{}, false, errors.ErrUnsupported
}

func (b *Book) ListRun(ctx context.Context, runID string) ([]books.Entry, error) {
	return nil, errors.ErrUnsupported
}

func (b *Book) Reversal(ctx context.Context, key, createdAt string) (books.Entry, error) {
	e, found, err := b.Get(ctx, key)
	if err != nil {
		return books.Entry{}, err
	}
	if !found {
		return books.Entry{}, fmt.Errorf("reversed key %q: %w", key, books.ErrNoOriginal)
	}
	return books.ReversalOf(e, createdAt)
}
