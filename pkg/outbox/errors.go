package outbox

import "errors"

var (
	// ErrInvalid marks a message that can never be queued or sent as it is:
	// a missing key, a run id or kind that would break the subject, no recipient,
	// an event that does not decode.
	ErrInvalid = errors.New("invalid outbox message")

	// ErrPermanent marks a delivery the outside system refused for good (an SMTP 5xx
	// reply). Retrying the same message would be refused again.
	ErrPermanent = errors.New("delivery refused")

	// ErrUnknownMark is returned for a cairn-outbox-sent value that is none of
	// sending, sent or cancelled.
	ErrUnknownMark = errors.New("unknown outbox mark")

	// ErrConfig is returned by NewSender for a configuration it cannot run with.
	ErrConfig = errors.New("invalid sender config")

	// errRefused means the outside system refused the message for good and its mark now
	// says refused: the message is terminated and its run waits for a person.
	errRefused = errors.New("message refused, mark refused")

	// errBusy means another live sender holds the message's mark right now: retry later.
	errBusy = errors.New("another sender is delivering the message")

	// ErrForbidden marks a message from a sender or to a recipient or URL that the sender's
	// configuration does not allow (Allow): it is refused, never sent.
	ErrForbidden = errors.New("address not allowed")

	// ErrSignature is returned by VerifyWebhook for a call whose signature, timestamp or key
	// does not check out.
	ErrSignature = errors.New("webhook signature does not verify")
)

// ErrForged marks a message whose signature does not hold, that is unsigned past the seal,
// or whose signer may not queue it (Trust): it is rejected, never sent.
var ErrForged = errors.New("outbox message not from a service that may queue it")
