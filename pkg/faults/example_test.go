package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cairnhq/cairn/pkg/faults"
)

// CAIRN_FAULTS=extract.before-write.2=error:temporary@once makes the extract step's second
// write fail once with a temporary error; the marker it leaves keeps the fault from firing
// again in the attempt that follows.
func ExampleParse() {
	dir, _ := os.MkdirTemp("", "faults-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	set, err := faults.Parse("extract.before-write.2=error:temporary@once, report.after-commit=stall", dir)
	if err != nil {
		fmt.Println(err)
		return
	}

	for attempt := 1; attempt <= 2; attempt++ {
		for n := 1; n <= 3; n++ {
			if err := set.Hit(ctx, "extract", faults.BeforeWrite, n); err != nil {
				fmt.Printf("attempt %d, write %d: %v (temporary: %t)\n", attempt, n, err, errors.Is(err, faults.ErrTemporary))
				break
			}
			fmt.Printf("attempt %d, write %d: written\n", attempt, n)
		}
	}
	fmt.Println("fired:", faults.Fired(dir, "extract.before-write.2=error:temporary@once"))
	fmt.Println("report stalls after its commit:", set.Stalls("report", faults.AfterCommit, 0))

	_, err = faults.Parse("extract.before-wirte=exit", dir)
	fmt.Println(err)
	// Output:
	// attempt 1, write 1: written
	// attempt 1, write 2: extract.before-write.2=error:temporary@once at extract.before-write.2: injected temporary fault (temporary: true)
	// attempt 2, write 1: written
	// attempt 2, write 2: written
	// attempt 2, write 3: written
	// fired: true
	// report stalls after its commit: true
	// CAIRN_FAULTS rule "extract.before-wirte=exit": unknown point "before-wirte" (one of before-commit, after-commit, before-write, after-write, lost-reply, before-next-publish, after-record, before-deliver, after-deliver)
}
