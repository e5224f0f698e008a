package ratelimit

import "errors"

// ErrUnavailable: the bucket could not be read or written for Config.Unavailable; no call
// was granted. It is temporary: the caller tries again later, and never calls unlimited.
var ErrUnavailable = errors.New("the rate limit's bucket is unavailable")

// ErrState: the limit's key holds a value that is not a limit's state.
var ErrState = errors.New("the rate limit's state is unreadable")

// ErrConfig: a limit or a limiter's configuration is invalid.
var ErrConfig = errors.New("invalid rate limit")

// ErrHold: a hold's duration is not more than 0 and at most MaxHold; nothing was held.
var ErrHold = errors.New("invalid hold")
