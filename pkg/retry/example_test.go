package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/pkg/retry"
)

// The schedule a person reads (`cairn faultmap` prints it so), and the range each wait is
// drawn from.
func ExamplePolicy() {
	p := retry.Policy{First: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second, Jitter: 0.1, Tries: 8}
	fmt.Println(p)
	for n := range 7 {
		lo, hi := p.Bounds(n)
		fmt.Printf("wait %d: %v to %v\n", n, lo, hi)
	}
	// Output:
	// 100ms, ×2 up to 5s, ±10%, 8 tries
	// wait 0: 90ms to 110ms
	// wait 1: 180ms to 220ms
	// wait 2: 360ms to 440ms
	// wait 3: 720ms to 880ms
	// wait 4: 1.44s to 1.76s
	// wait 5: 2.88s to 3.52s
	// wait 6: 4.5s to 5s
}

// A call that fails twice with a busy server and then succeeds is tried three times; an error
// not marked temporary is not tried again.
func ExamplePolicy_Do() {
	ctx := context.Background()
	p := retry.Policy{First: time.Millisecond, Jitter: 0.1, Tries: 5}
	errBusy := errors.New("503 service unavailable")

	err := p.Do(ctx, retry.IsTemporary, func(try int) error {
		fmt.Println("try", try)
		if try < 2 {
			return retry.Temporary(errBusy)
		}
		return nil
	})
	fmt.Println("result:", err)

	errRefused := errors.New("422 invoice already paid")
	err = p.Do(ctx, retry.IsTemporary, func(try int) error {
		fmt.Println("try", try)
		return errRefused
	})
	fmt.Println("result:", err, errors.Is(err, errRefused))
	// Output:
	// try 0
	// try 1
	// try 2
	// result: <nil>
	// try 0
	// result: 422 invoice already paid true
}
