package service

import (
	"fmt"

	"github.com/cairnhq/cairn/pkg/consume"
)

// errReturned: a service's Run returned nil although nothing stopped it, which is a loop
// that ended as much as one whose durable was deleted.
var errReturned = fmt.Errorf("it returned before it was stopped: %w", consume.ErrEnded)
