package idempotency_test

import (
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/pkg/idempotency"
)

// notes is a store that enforces its keys: a repeat of the same payload is harmless, another
// payload under a key already written is refused with a Conflict.
type notes map[string]string

func (n notes) Write(key string, payload []byte) error {
	fresh := idempotency.Digest(payload)
	if stored, ok := n[key]; ok && stored != fresh {
		return idempotency.Conflict(key, stored, fresh)
	}
	n[key] = fresh
	return nil
}

func Example() {
	store := notes{}
	key := "run-2026-10-13-ldh:debit:SUP-07"

	fmt.Println(store.Write(key, []byte(`{"total":"482.50"}`)))
	// A restarted attempt writes the same note again: nothing changes.
	fmt.Println(store.Write(key, []byte(`{"total":"482.50"}`)))

	// An attempt that computed another total is refused, never kept silently.
	err := store.Write(key, []byte(`{"total":"480.00"}`))
	fmt.Println(errors.Is(err, idempotency.ErrConflict))
	var c *idempotency.ConflictError
	if errors.As(err, &c) {
		fmt.Println("key:", c.Key)
		fmt.Println("stored:", c.Stored)
		fmt.Println("new:   ", c.New)
	}
	// Output:
	// <nil>
	// <nil>
	// true
	// key: run-2026-10-13-ldh:debit:SUP-07
	// stored: sha256:bf6c6e6c89635ac834b181f398413ef58a7aa426bfd357ab5ced630e5e355b47
	// new:    sha256:0181663825779e4f0ed94029adcffc96dc98a520d3201c76cab98da5d00fa4b5
}
