package events

import (
	"encoding/json"
	"fmt"
)

// The limits of what a command may carry, in bytes. A command over one is refused as it is
// decoded ([DecodeCommand]) with an error wrapping [ErrTooLong] and [ErrInvalid] that names
// the field and its limit, and is recorded on [RejectedSubject] like any refused command:
// what a command carries ends up in the run's record, which has a fixed budget.
const (
	// MaxRequestID bounds a command's id (its ce-id, or the data's request_id). The record
	// keeps a digest of an id over 64 bytes; ids Cairn derives from one (<id>:undo,
	// <id>:again:<rev>) are made from that digest, so they stay within the limit too.
	MaxRequestID = 128
	// MaxName bounds a name a command gives: approve's by (who approved), which the record
	// keeps (its budget counts on this much).
	MaxName = 40
	// MaxReason bounds the reason a rejection keeps ([Rejected].Reason).
	MaxReason = 512
)

// checkLimits refuses a command whose id or data's request_id or by is over its limit.
func checkLimits(id string, data []byte) error {
	if err := checkLen("request_id", id, MaxRequestID); err != nil {
		return err
	}
	var c struct {
		RequestID *string `json:"request_id"`
		By        *string `json:"by"`
	}
	if len(data) == 0 || json.Unmarshal(data, &c) != nil {
		return nil // not an object of strings: the command's own decoding says why
	}
	for _, f := range []struct {
		name  string
		value *string
		limit int
	}{{"request_id", c.RequestID, MaxRequestID}, {"by", c.By, MaxName}} {
		if f.value == nil {
			continue
		}
		if err := checkLen(f.name, *f.value, f.limit); err != nil {
			return err
		}
	}
	return nil
}

func checkLen(field, value string, limit int) error {
	if len(value) > limit {
		return fmt.Errorf("%w: %w: %s is %d bytes, at most %d", ErrInvalid, ErrTooLong, field, len(value), limit)
	}
	return nil
}
