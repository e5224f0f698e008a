package recon

import (
	"fmt"
	"time"
)

// dateLayout is how dates travel in Cairn: run parameters, ERP rows, the truth.
const dateLayout = "2006-01-02"

// validID reports whether s matches ^[A-Za-z0-9_-]{1,64}$, the rule for every id that
// ends up in a subject or a key.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// checkID returns an error naming what is wrong with id, or nil.
func checkID(what, id string) error {
	if !validID(id) {
		return fmt.Errorf("%s %q must match ^[A-Za-z0-9_-]{1,64}$: %w", what, id, ErrInvalidID)
	}
	return nil
}

// checkDate accepts only a real calendar date written 2006-01-02.
func checkDate(what, date string) error {
	t, err := time.Parse(dateLayout, date)
	if err != nil || t.Format(dateLayout) != date {
		return fmt.Errorf("%s %q must be a date written yyyy-mm-dd: %w", what, date, ErrInvalidID)
	}
	return nil
}
