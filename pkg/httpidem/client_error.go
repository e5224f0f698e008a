package httpidem

import (
	"fmt"
	"time"

	"github.com/cairnhq/cairn/pkg/fence"
)

// Error is a write that is not done, classed: errors.Is(err, ErrInFlight) and the like
// tell what to do, errors.As(err, &e) gives the details. Each class also matches the
// mark the step runner (package runner) acts on, so a step may return it as it is:
//
//	ErrInFlight, ErrRateLimited, ErrTemporary  retry.ErrTemporary      retried with backoff
//	ErrFenced                                  fence.ErrFenced         counted as fenced, stopped
//	ErrKeyConflict                             idempotency.ErrConflict the run handed over
//	ErrRejected                                (none)                  the step parks the item
//
// ErrRejected has no runner mark: a step that meets it parks the item
// (runner.Result.Parked) with the Problem as its reason, rather than failing the attempt.
type Error struct {
	Class   error  // one of the Err... classes above
	Key     string // the write's key
	Status  int    // the answer's status; 0 when no answer came
	Problem *Problem
	Wait    time.Duration // ErrRateLimited: the Retry-After, 0 when none was sent
	Err     error         // the cause: a transport error, an *idempotency.ConflictError
}

func (e *Error) Error() string {
	s := fmt.Sprintf("writing %s: %v", e.Key, e.Class)
	if e.Status != 0 {
		s += fmt.Sprintf(" (%d)", e.Status)
	}
	if e.Wait > 0 {
		s += fmt.Sprintf(", retry after %s", e.Wait)
	}
	if e.Problem != nil && (e.Problem.Title != "" || e.Problem.Detail != "") {
		s += ": " + e.Problem.Title
		if e.Problem.Detail != "" {
			s += ": " + e.Problem.Detail
		}
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap gives the class, the runner's mark for it, and the cause. The temporary classes
// are retry.ErrTemporary themselves.
func (e *Error) Unwrap() []error {
	out := []error{e.Class}
	if e.Class == ErrFenced {
		out = append(out, fence.ErrFenced)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}
