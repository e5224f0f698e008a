package recon

import (
	"errors"
	"fmt"
)

var (
	// ErrUnreadable marks an invoice that no extractor can read: permanent for that item.
	// Errors that wrap it are *UnreadableError values that carry the reason.
	ErrUnreadable = errors.New("unreadable invoice")
	// ErrInvalidAmount marks an amount that is not a well-formed rupee amount.
	ErrInvalidAmount = errors.New("invalid amount")
	// ErrInvalidID marks an identifier outside ^[A-Za-z0-9_-]{1,64}$ or a malformed date.
	ErrInvalidID = errors.New("invalid identifier")
	// ErrInvalidConfig marks a GenConfig that cannot be generated.
	ErrInvalidConfig = errors.New("invalid gen config")
	// ErrPOCollision marks a purchase-order prefix already used by another night.
	ErrPOCollision = errors.New("purchase-order prefix collision")
	// ErrNotTheDocument marks an answer about another invoice or supplier than its
	// document's (CheckAnswer); such errors are also *UnreadableError values, Invalid.
	ErrNotTheDocument = errors.New("answer is not about its document")
)

// UnreadableError is an invoice that cannot be read, with the reason in plain words
// ("no line items found"). It matches ErrUnreadable with errors.Is.
type UnreadableError struct {
	InvoiceNo string // empty when the invoice number itself could not be read
	Reason    string
	// Invalid: the extractor's answer broke a rule (not line-item JSON, another document's
	// invoice), rather than the extractor finding the document unreadable. Such an answer
	// is not memoised: asking again, after a fix, may do better.
	Invalid bool
	err     error // what else it matches, such as ErrNotTheDocument
}

func (e *UnreadableError) Error() string {
	if e.InvoiceNo == "" {
		return fmt.Sprintf("%s: %s", ErrUnreadable, e.Reason)
	}
	return fmt.Sprintf("invoice %s: %s: %s", e.InvoiceNo, ErrUnreadable, e.Reason)
}

// Unwrap makes errors.Is(err, ErrUnreadable) true, and errors.Is of what else it marks.
func (e *UnreadableError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrUnreadable, e.err}
	}
	return []error{ErrUnreadable}
}

// invalidAnswer marks err, an *UnreadableError about an answer, Invalid.
func invalidAnswer(err error) error {
	var u *UnreadableError
	if errors.As(err, &u) {
		u.Invalid = true
	}
	return err
}

func unreadable(invoiceNo, format string, args ...any) error {
	return &UnreadableError{InvoiceNo: invoiceNo, Reason: fmt.Sprintf(format, args...)}
}
