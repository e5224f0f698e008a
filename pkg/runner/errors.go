package runner

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/fence"
	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/retry"
)

var (
	// ErrPermanent marks an error that no retry will mend.
	ErrPermanent = errors.New("permanent")
	// ErrVerify: the step's result differs from what it meant to do.
	ErrVerify = errors.New("verification failed")
	// ErrSourceChanged: the documents changed since the run read them.
	ErrSourceChanged = errors.New("source changed")
	// ErrRecordFull: the checkpoint record has no room for what the step would write (its
	// commit and a failure), even with its outputs moved to the artifact store.
	ErrRecordFull = errors.New("checkpoint record full")
)

// Anomaly is what a step's Verify returns for something it found that does not make its
// result wrong but leaves the run's evidence unclear (a total that ties out only within a
// tolerance, an answer the model hedged): the step is verified and committed, the anomaly is
// kept in its last_error and on the timeline (verification.anomaly), and a later step that
// cannot be undone waits for a person before it starts.
func Anomaly(err error) error { return &anomaly{err} }

type anomaly struct{ err error }

func (a *anomaly) Error() string { return a.err.Error() }
func (a *anomaly) Unwrap() error { return a.err }

// Temporary marks err as temporary: it is retry.Temporary, the one mark of the temporary
// class (retry.ErrTemporary), which stores give their drivers' transient errors too
// (sqlidem.Transient: SQLITE_BUSY, PostgreSQL's 40001, 40P01, 57P01, lost connections),
// and an injected temporary fault carries. nil becomes retry.ErrTemporary.
func Temporary(err error) error { return retry.Temporary(err) }

// Permanent marks err as permanent.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return classed{ErrPermanent, err}
}

// classed is an error with its class: it reads as the error alone, and is both.
type classed struct{ class, err error }

func (c classed) Error() string   { return c.err.Error() }
func (c classed) Unwrap() []error { return []error{c.class, c.err} }

type class int

const (
	classTemporary class = iota
	classFenced
	classStopped
	classUnknown
)

func classify(err error) class {
	switch {
	case errors.Is(err, kvcheckpoint.ErrFenced), errors.Is(err, fence.ErrFenced),
		errors.Is(err, kvcheckpoint.ErrNewerSchema): // a newer release wrote the record: no longer ours
		return classFenced
	case errors.Is(err, idempotency.ErrConflict):
		// A key holds another payload: no retry changes what either attempt wrote.
		return classUnknown
	case errors.Is(err, context.Canceled):
		return classStopped
	case errors.Is(err, retry.ErrTemporary),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), network(err):
		return classTemporary
	default:
		return classUnknown
	}
}

// network reports a network failure that the next try may not meet: the peer reset,
// refused or dropped the connection, or a network operation timed out. Every outside
// write is keyed, so trying a write again whose answer was lost is safe.
func network(err error) bool {
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// IsTemporary reports whether the runner retries err: marked temporary (retry.ErrTemporary,
// an injected temporary fault among them), a timeout, or a network failure. A key holding another
// payload, a lost fence and a stop are never temporary.
func IsTemporary(err error) bool { return classify(err) == classTemporary }

func (c class) String() string {
	return [...]string{"temporary", "fenced", "stopped", "unknown"}[c]
}
