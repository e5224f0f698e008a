package events

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// MaxIDLen is the longest run id, step name or other id of a command (a
// pipeline's own ids among them) accepted by [ValidID].
const MaxIDLen = 64

// ValidID reports whether value may be used as an id: 1 to 64 characters
// from [A-Za-z0-9_-]. Dots, stars and colons would break subjects and keys.
// The error names the field and the value and wraps [ErrInvalidID].
func ValidID(field, value string) error {
	if value == "" {
		return fmt.Errorf("%s is empty: %w", field, ErrInvalidID)
	}
	if len(value) > MaxIDLen {
		return fmt.Errorf("%s %q is longer than %d characters: %w", field, value, MaxIDLen, ErrInvalidID)
	}
	for _, c := range []byte(value) {
		if !idChar(c) {
			return fmt.Errorf("%s %q has %q, only A-Z a-z 0-9 _ - are allowed: %w", field, value, rune(c), ErrInvalidID)
		}
	}
	return nil
}

func idChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// maxAttrLen bounds the free-form attributes (id, source, traceparent): they
// travel as NATS headers and the id doubles as the Nats-Msg-Id.
const maxAttrLen = 512

// checkAttr refuses what a NATS header cannot carry unchanged: control
// characters and white space (the server trims it, and CR/LF would end the
// header).
func checkAttr(name, value string) error {
	if len(value) > maxAttrLen {
		return fmt.Errorf("%s is longer than %d bytes", name, maxAttrLen)
	}
	if i := strings.IndexFunc(value, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar
	}); i >= 0 {
		return fmt.Errorf("%s %q has white space or a control character at byte %d", name, value, i)
	}
	return nil
}

// StepReadyID is the CloudEvent id (and Nats-Msg-Id) of a step event:
// <run_id>:<step>:ready:<rev>, rev being the checkpoint revision of the
// commit or command that scheduled the step.
func StepReadyID(runID, step string, rev uint64) string {
	return runID + ":" + step + ":ready:" + strconv.FormatUint(rev, 10)
}

// AuditStepID is the id of an audit event about a step:
// <run_id>:<step>:<event>:<rev>.
func AuditStepID(runID, step, event string, rev uint64) string {
	return runID + ":" + step + ":" + event + ":" + strconv.FormatUint(rev, 10)
}

// AuditItemID is the id of an audit event about one item of a step (a
// document, a key): <run_id>:<step>:<event>:<token>:<item>:<try>, try being
// the in-process retry number.
func AuditItemID(runID, step, event string, token uint64, item string, try int) string {
	return runID + ":" + step + ":" + event + ":" + strconv.FormatUint(token, 10) + ":" + item + ":" + strconv.Itoa(try)
}

// RejectedID is the id of the record of a refused stream message:
// <stream>:<seq>.
func RejectedID(stream string, seq uint64) string {
	return stream + ":" + strconv.FormatUint(seq, 10)
}
