// Package undo is the reference night's undo: its outside systems (the ledger, the stock,
// the outbox's mail) as the Systems the generic compensator (package pkg/undo) reverses
// their effects through.
package undo

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/fence"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/saga"
	"github.com/cairnhq/cairn/pkg/undo"
)

// Step is the lease step of an undo.
const Step = undo.Step

// EventSagaRefused is the timeline event of a saga record the compensator refused.
const EventSagaRefused = undo.EventSagaRefused

// Night is what the night's systems are reached through.
type Night struct {
	JS jetstream.JetStream
	// Ledger is the ledger (shadow: its shadow tables) the reversals of ledger rows are
	// written through: the ledger database, or its API (night.Env.LedgerBook).
	Ledger func(shadow bool) books.Book
	ERP    *books.DB
	Marks  jetstream.KeyValue // cairn-outbox-sent
	Store  *kc.Store          // the compensator's (signs the withdrawals of mail)
	Now    func() time.Time
}

// Systems are the night's systems by the names its effects carry: the ledger, the stock and
// the mail.
func (n Night) Systems() (map[string]undo.System, error) {
	if n.JS == nil || n.Ledger == nil || n.ERP == nil || n.Marks == nil || n.Store == nil {
		return nil, errors.New("compensator: needs JetStream, the checkpoint store, both databases and the outbox marks")
	}
	if n.Now == nil {
		n.Now = time.Now
	}
	return map[string]undo.System{
		night.SystemLedger: ledger{n},
		night.SystemStock:  stock{n},
		saga.Mail:          undo.Mail{JS: n.JS, Space: assets.Default, Marks: n.Marks, Store: n.Store, Now: n.Now},
	}, nil
}

type ledger struct{ n Night }

func (l ledger) RaiseFence(ctx context.Context, t fence.Token, rec *kc.Record) error {
	return l.n.Ledger(rec.Params.Shadow).RaiseFence(ctx, t)
}

// Reverse posts the negation of the row the ledger holds under the effect's key, never what
// the intent says it should be.
func (l ledger) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	book := l.n.Ledger(rec.Params.Shadow)
	rev, err := book.Reversal(ctx, e.Intent.Key, l.n.Now().UTC().Format(time.RFC3339Nano))
	if errors.Is(err, books.ErrNoOriginal) {
		return false, nil // the intent's write never landed: nothing to reverse
	}
	if err != nil {
		return false, err
	}
	return book.Post(ctx, t, rev)
}

type stock struct{ n Night }

func (s stock) RaiseFence(ctx context.Context, t fence.Token, rec *kc.Record) error {
	return s.n.ERP.Stock(rec.Params.Shadow).RaiseFence(ctx, t)
}

func (s stock) Reverse(ctx context.Context, t fence.Token, rec *kc.Record, e saga.Effect) (bool, error) {
	var asked books.Adjustment
	if err := json.Unmarshal(e.Intent.Reverse.Payload, &asked); err != nil {
		return false, err
	}
	st := s.n.ERP.Stock(rec.Params.Shadow)
	rev, err := st.Reversal(ctx, e.Intent.Key, asked.Reason, s.n.Now().UTC().Format(time.RFC3339Nano))
	if errors.Is(err, books.ErrNoOriginal) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.Apply(ctx, t, rev)
}
