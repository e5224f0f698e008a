package app

import (
	"context"
	"errors"
)

// stoppedWhileStarting is err, which ended Run before its services ran, or nil when it is
// ctx's end: a stop asked for while the services start (a RunLocal closed at once, a
// process stopped during its start-up) is a clean stop, as one asked for once they run is.
func stoppedWhileStarting(ctx context.Context, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil
	}
	return err
}
