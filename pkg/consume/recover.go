package consume

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/nats-io/nats.go/jetstream"
)

// Recover, deferred at the boundary of a message handler (or of any unit of work a loop
// runs), turns a panic into an error wrapping [ErrPanic]: it logs the panic with its stack,
// passes the error to settle, which records it as the handler records a failure of its own
// (a rejection, a handover), and then terms m, when there is one, so that the message is
// not delivered again to panic again: a person sees what settle recorded. A panic of settle
// itself is logged and goes no further.
//
//	defer consume.Recover(log, m, func(err error) { h.reject(ctx, m, err) })
func Recover(log *slog.Logger, m jetstream.Msg, settle func(err error)) {
	v := recover()
	if v == nil {
		return
	}
	err := fmt.Errorf("%w: %v", ErrPanic, v)
	attrs := []any{slog.Any("error", err), slog.String("stack", string(debug.Stack()))}
	if m != nil {
		attrs = append(attrs, slog.String("subject", m.Subject()))
	}
	log.Error("handler panicked; recorded and settled instead of crashing", attrs...)
	if settle != nil {
		func() {
			defer func() {
				if v := recover(); v != nil {
					log.Error("recording a handler's panic panicked too", slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
				}
			}()
			settle(err)
		}()
	}
	if m != nil {
		_ = m.TermWithReason(cut(err.Error(), 200))
	}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
