package night

import "strings"

// The supplier mailboxes debit notes go to: accounts+<supplier id, lower case>@suppliers.example.
const (
	supplierPrefix = "accounts+"
	supplierDomain = "@suppliers.example"
)

// SupplierAddress is where the debit notes of supplier id go: the one shape
// IsSupplierAddress accepts.
func SupplierAddress(id string) string { return supplierPrefix + lowerID(id) + supplierDomain }

// IsSupplierAddress reports whether to is an address SupplierAddress makes.
func IsSupplierAddress(to string) bool {
	id, ok := strings.CutPrefix(to, supplierPrefix)
	if id, ok = strings.CutSuffix(id, supplierDomain); !ok || id == "" || len(id) > 64 {
		return false
	}
	return !strings.ContainsFunc(id, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') })
}

// Recipients is the rule by which the night's steps derive whom their mail goes to, for the
// sender to check (outbox.Allow.Mail): a debit note to a supplier's mailbox, the report to
// financeTo, a withdrawal to whomever the message it withdraws went. Notices are not the
// steps': they go where the service's settings say.
func Recipients(financeTo string) func(kind, to string) bool {
	return func(kind, to string) bool {
		switch kind {
		case kindDebit:
			return IsSupplierAddress(to)
		case kindReport:
			return to == financeTo
		case kindWithdraw:
			return IsSupplierAddress(to) || to == financeTo
		}
		return false
	}
}

// The kinds of the night's messages (outbox subject tokens).
const (
	kindDebit    = "debit"
	kindReport   = "report"
	kindWithdraw = "withdraw"
)
