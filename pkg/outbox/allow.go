package outbox

import (
	"fmt"
	"slices"
)

// Allow is whom a sender may send as and to, by its configuration: mail only from From and
// only to the recipients Mail accepts, a webhook only to Webhook. An address a message names
// is never a target by itself: a message Check refuses is marked refused and never sent.
type Allow struct {
	// From is the one From a mail may carry, exactly as the steps queue it.
	From string
	// Webhook is the one URL a webhook may go to (CAIRN_NOTIFY_WEBHOOK); "" allows none.
	Webhook string
	// Mail reports whether mail of kind may go to the address to (as queued): the rule by
	// which the steps derive their recipients. nil allows no mail.
	Mail func(kind, to string) bool
}

func (a Allow) validate() error {
	if a.From == "" && a.Webhook == "" {
		return fmt.Errorf("Allow names no sender address and no webhook: the sender could send nothing")
	}
	return nil
}

// Check returns nil when a allows m, else an error wrapping ErrForbidden and ErrPermanent
// that names the address refused.
func (a Allow) Check(m Message) error {
	if m.Webhook() {
		if a.Webhook == "" || m.To[0] != a.Webhook {
			return fmt.Errorf("%w: %w: message %q is addressed to %q, not to the configured webhook", ErrPermanent, ErrForbidden, m.Key, truncate(m.To[0], 256))
		}
		return nil
	}
	if a.From == "" || m.From != a.From {
		return fmt.Errorf("%w: %w: message %q is from %q, not from the configured sender %q", ErrPermanent, ErrForbidden, m.Key, truncate(m.From, 256), a.From)
	}
	if i := slices.IndexFunc(m.To, func(to string) bool { return a.Mail == nil || !a.Mail(m.Kind, to) }); i >= 0 {
		return fmt.Errorf("%w: %w: message %q of kind %s may not go to %q", ErrPermanent, ErrForbidden, m.Key, m.Kind, truncate(m.To[i], 256))
	}
	return nil
}

// Webhook reports whether m is a webhook call: a message to one http(s) URL (Routed sends it
// to its Webhook transport, Allow checks it against its Webhook).
func (m Message) Webhook() bool { return len(m.To) == 1 && isURL(m.To[0]) }
