package events

import "errors"

// ErrInvalid marks every refusal of this package: a message that is not a
// CloudEvent Cairn understands, or a payload that breaks a rule. Callers
// settle such a message with TermWithReason and record it on
// [RejectedSubject]; retrying cannot help.
var ErrInvalid = errors.New("invalid event")

// ErrInvalidID is returned by [ValidID]. Errors of this package that come
// from a bad id wrap both ErrInvalidID and ErrInvalid.
var ErrInvalidID = errors.New("invalid id")

// ErrTooLong is returned by [DecodeCommand] for a command whose id or a field of its data is
// over its limit (limits.go); it wraps ErrInvalid too.
var ErrTooLong = errors.New("field too long")
