package outbox

import (
	"context"
	"fmt"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
)

// Message is one outside message, queued on CAIRN_OUTBOX under its key.
type Message struct {
	Key        string    `json:"key"` // idempotency key, e.g. run-x:debit:SUP-07
	RunID      string    `json:"run_id"`
	Kind       string    `json:"kind"` // subject token: "debit", "report", "withdraw", "handover"
	Step       string    `json:"step"`
	Generation int       `json:"generation"`
	Token      uint64    `json:"token"` // lease token of the step attempt that queued it
	Shadow     bool      `json:"shadow"`
	From       string    `json:"from"`
	To         []string  `json:"to"`
	Subject    string    `json:"subject"`
	Body       string    `json:"body"`
	QueuedAt   time.Time `json:"queued_at"` // becomes the Date: header, so the mail is deterministic
	// Reverses is the key of the message a withdrawal withdraws (X-Cairn-Withdraws), or empty.
	Reverses string `json:"reverses,omitempty"`
	// Requeue is the checkpoint revision of the resume that queued this copy again (0 for
	// the step's own copy); it gives the copy an event id of its own (see EventID).
	Requeue uint64 `json:"requeue,omitempty"`
}

// Kinds of the notices to people about a run (the service's notifications).
const (
	KindHandover = "handover" // a run was handed over
	KindApproval = "approval" // a run waits for approval
)

// Notice reports whether m tells a person about its run (a handover or a wait for
// approval) rather than carrying the run's work: such a message is sent whatever state the
// run's record is in, since the runs whose records cannot be trusted are exactly the ones a
// person must look at.
func (m Message) Notice() bool { return m.Kind == KindHandover || m.Kind == KindApproval }

// maxKeyLen keeps a key well inside one header line (Message-ID, X-Cairn-Key).
const maxKeyLen = 512

// idPattern is DESIGN.md's rule for run ids, step names and other subject tokens.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate is nil when m may be queued; else one sentence per broken rule, wrapped in
// ErrInvalid: what Queue refuses m for.
func (m Message) Validate() error { return m.validate() }

// validate returns one sentence per broken rule, wrapped in ErrInvalid.
func (m Message) validate() error {
	var problems []string
	if m.Key == "" {
		problems = append(problems, "key is empty")
	} else if len(m.Key) > maxKeyLen {
		problems = append(problems, fmt.Sprintf("key is longer than %d bytes", maxKeyLen))
	} else if strings.ContainsFunc(m.Key, badKeyRune) {
		problems = append(problems, "key holds a space, a control character or an angle bracket")
	}
	if !idPattern.MatchString(m.RunID) {
		problems = append(problems, fmt.Sprintf("run_id %q does not match %s", m.RunID, idPattern))
	}
	if !idPattern.MatchString(m.Kind) {
		problems = append(problems, fmt.Sprintf("kind %q does not match %s", m.Kind, idPattern))
	}
	if !idPattern.MatchString(m.Step) {
		problems = append(problems, fmt.Sprintf("step %q does not match %s", m.Step, idPattern))
	}
	if m.Generation < 0 {
		problems = append(problems, "generation is negative")
	}
	// A webhook call has no sender: its From is needed only when one is given.
	if _, err := mail.ParseAddress(m.From); err != nil && !(m.Webhook() && m.From == "") {
		problems = append(problems, fmt.Sprintf("from %q is not an address", m.From))
	}
	if len(m.To) == 0 {
		problems = append(problems, "to names nobody")
	}
	for _, to := range m.To {
		if isURL(to) && len(m.To) == 1 {
			continue // a webhook
		}
		if _, err := mail.ParseAddress(to); err != nil {
			problems = append(problems, fmt.Sprintf("to %q is not an address", to))
		}
	}
	if strings.ContainsAny(m.Subject, "\r\n") {
		problems = append(problems, "subject holds a line break")
	}
	if m.QueuedAt.IsZero() {
		problems = append(problems, "queued_at is not set")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w %q: %s", ErrInvalid, m.Key, strings.Join(problems, "; "))
	}
	return nil
}

func badKeyRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == '<' || r == '>'
}

// EventID is the id (and Nats-Msg-Id) a message is queued under: its key and the token of
// the attempt that queued it. A repeat by the same attempt is a duplicate the stream drops;
// a restart's copy (a higher token) is stored beside the dead attempt's, so the sender,
// which drops a copy whose token is below the one its step committed with, still finds the
// restart's copy to send. The mark, keyed by the message key, sends it once. A copy queued
// again by a resume ends in ":r<revision>", so the stream's deduplication keeps it too.
func EventID(m Message) string {
	if m.Requeue > 0 {
		return fmt.Sprintf("%s:t%d:r%d", m.Key, m.Token, m.Requeue)
	}
	return fmt.Sprintf("%s:t%d", m.Key, m.Token)
}

// Queue publishes m as a CloudEvent (TypeOutbox, source "/cairn/<m.Step>") on
// events.OutboxSubject(m.RunID, m.Kind) (with In, the space's: assets.Space.Outbox) with
// Nats-Msg-Id = EventID(m), and waits for the PubAck. A duplicate ack is success when the
// stored copy is the same message (the same [Digest]): it is already queued. A stored copy
// with another payload under the key is idempotency.ErrConflict naming the key and both
// digests, and m is not queued: the stream would have dropped it.
//
// A restart's copy has another Msg-Id (a higher token), so the stream cannot compare it with
// the dead attempt's; the caller compares it with what it recorded before (the saga intent's
// digest) before calling Queue.
//
// With SignedBy, the message carries its queuer's signature (trust.go). With In, it is
// queued on the space's outbox, which only a sender of that space (SenderConfig.Space) reads.
func Queue(ctx context.Context, js jetstream.JetStream, m Message, opts ...QueueOption) error {
	var o queueOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := m.validate(); err != nil {
		return err
	}
	e, err := events.New(EventID(m), events.TypeOutbox, "/cairn/"+m.Step, m.RunID, m.QueuedAt, m)
	if err != nil {
		return fmt.Errorf("building outbox event %q: %w", m.Key, err)
	}
	msg, err := events.Encode(o.space.Outbox(m.RunID, m.Kind), e)
	if err != nil {
		return fmt.Errorf("encoding outbox event %q: %w", m.Key, err)
	}
	if o.signer != nil {
		o.signer.SignMsg(identity.DomainOutbox, msg)
	}
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(EventID(m)))
	if err != nil {
		return fmt.Errorf("queueing outbox message %q: %w", m.Key, err)
	}
	if ack.Duplicate {
		if err := checkStored(ctx, js, ack.Stream, ack.Sequence, m); err != nil {
			return fmt.Errorf("queueing outbox message %q: %w", m.Key, err)
		}
	}
	return nil
}

// isURL: a message to an http(s) URL goes to a webhook.
func isURL(to string) bool {
	u, err := url.Parse(to)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
