package consume

import "errors"

// ErrEnded means a consume loop ended although its context did not: the consumer was
// deleted, the server no longer knows it, the connection closed. The error that wraps it
// names the consumer and its stream, and wraps the cause too.
var ErrEnded = errors.New("the consume loop ended unexpectedly")

// ErrPanic means a message handler panicked; [Recover] turned the panic into this error,
// which names the panic's value.
var ErrPanic = errors.New("the handler panicked")

// errClosed is the cause when the consumer closed without saying why.
var errClosed = errors.New("the consumer closed")
