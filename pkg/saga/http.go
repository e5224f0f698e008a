package saga

import (
	"encoding/json"
	"fmt"
)

// HTTP is the system of an effect written to an HTTP API with an Idempotency-Key
// (package httpidem's Client): the intent's Key is the header's key, its Digest the
// "sha256:<hex>" of the request body (so Refuses compares payloads before the call), and
// its outcome carries the receipt ([WithReceipt]).
const HTTP = "http"

// Receipt is what an HTTP write's outcome record carries as its Payload: the answer's
// status, the provider's reference id, and the digest of the answer's body.
type Receipt struct {
	Status       int    `json:"status"`
	Reference    string `json:"reference,omitempty"`
	AnswerDigest string `json:"answer_digest"`
	Replayed     bool   `json:"replayed,omitempty"`
}

// WithReceipt is the outcome record of intent: done, carrying rc.
func WithReceipt(intent Record, rc Receipt) (Record, error) {
	b, err := json.Marshal(rc)
	if err != nil {
		return Record{}, fmt.Errorf("saga receipt of %s: %w", intent.Key, err)
	}
	out := intent
	out.Phase, out.Outcome, out.Payload, out.Digest, out.Reverse = Outcome, "done", b, "", nil
	return out, nil
}

// ReceiptOf reads the receipt an outcome record carries; ok is false for a record
// without one.
func ReceiptOf(r Record) (Receipt, bool) {
	var rc Receipt
	if r.Phase != Outcome || len(r.Payload) == 0 || json.Unmarshal(r.Payload, &rc) != nil || rc.Status == 0 {
		return Receipt{}, false
	}
	return rc, true
}
