package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Mark is a message's state in cairn-outbox-sent, stored as plain text.
type Mark string

const (
	// Sending: a sender claimed the message and may be handing it over right now,
	// or died while doing so.
	Sending Mark = "sending"
	// Sent: the message was handed over; it is never delivered again.
	Sent Mark = "sent"
	// Cancelled: the compensator claimed the message before any sender did; it is never delivered.
	Cancelled Mark = "cancelled"
	// Refused: the outside system refused the message for good (an SMTP 5xx, a webhook 4xx);
	// it was not handed over. The run waits for a person; a resume reopens the mark and
	// queues the message again ([Reopen]), and a Cancel still wins.
	Refused Mark = "refused"
)

func (k Mark) known() bool {
	return k == Sending || k == Sent || k == Cancelled || k == Refused
}

// keyHash names a message everywhere its key cannot go as it is: KV keys and file names.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// MarkKey is the cairn-outbox-sent key of a message: "<run_id>.<hex sha256 of key>".
func MarkKey(runID, key string) string {
	return runID + "." + keyHash(key)
}

// MarkOf reads a message's mark ("" when none).
func MarkOf(ctx context.Context, kv jetstream.KeyValue, runID, key string) (Mark, error) {
	mark, _, err := readMark(ctx, kv, runID, key)
	return mark, err
}

// readMark returns the mark and its revision; ("", 0) when the message has none.
func readMark(ctx context.Context, kv jetstream.KeyValue, runID, key string) (Mark, uint64, error) {
	entry, err := kv.Get(ctx, MarkKey(runID, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading outbox mark of %q: %w", key, err)
	}
	mark := Mark(entry.Value())
	if !mark.known() {
		return "", 0, fmt.Errorf("reading outbox mark of %q: %w %q", key, ErrUnknownMark, entry.Value())
	}
	return mark, entry.Revision(), nil
}

// claimMark creates the mark; ok is false when another writer created one first.
func claimMark(ctx context.Context, kv jetstream.KeyValue, runID, key string, mark Mark) (rev uint64, ok bool, err error) {
	rev, err = kv.Create(ctx, MarkKey(runID, key), []byte(mark))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("claiming outbox mark of %q as %s: %w", key, mark, err)
	}
	return rev, true, nil
}

// moveMark sets the mark by compare-and-set on rev; ok is false when the mark moved since.
func moveMark(ctx context.Context, kv jetstream.KeyValue, runID, key string, mark Mark, rev uint64) (newRev uint64, ok bool, err error) {
	newRev, err = kv.Update(ctx, MarkKey(runID, key), []byte(mark), rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("marking outbox message %q %s: %w", key, mark, err)
	}
	return newRev, true, nil
}

// Cancel claims the mark as cancelled with Create. It reports true when the message
// is cancelled and was never handed to a sender: this call won the Create, or an
// earlier Cancel did (so an interrupted undo that cancels again still sees true).
// False means a sender claimed it first: the message may have gone.
//
// A refused message was never handed over either: its mark moves to cancelled.
func Cancel(ctx context.Context, kv jetstream.KeyValue, runID, key string) (bool, error) {
	for range maxMarkRaces {
		_, won, err := claimMark(ctx, kv, runID, key, Cancelled)
		if err != nil || won {
			return won, err
		}
		mark, rev, err := readMark(ctx, kv, runID, key)
		if err != nil {
			return false, fmt.Errorf("cancelling outbox message %q: %w", key, err)
		}
		if mark != Refused {
			return mark == Cancelled, nil
		}
		if _, won, err = moveMark(ctx, kv, runID, key, Cancelled, rev); err != nil || won {
			return won, err
		}
	}
	return false, fmt.Errorf("cancelling outbox message %q: mark moved %d times: %w", key, maxMarkRaces, errBusy)
}

// Reopen removes a refused mark by compare-and-set, so that the message can be queued and
// tried again (a resume after the cause was fixed). It reports whether it removed one; any
// other mark is left as it is.
func Reopen(ctx context.Context, kv jetstream.KeyValue, runID, key string) (bool, error) {
	mark, rev, err := readMark(ctx, kv, runID, key)
	if err != nil || mark != Refused {
		return false, err
	}
	err = kv.Delete(ctx, MarkKey(runID, key), jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reopening outbox message %q: %w", key, err)
	}
	return true, nil
}
