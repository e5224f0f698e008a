package retry

import "errors"

// ErrTemporary marks an error worth retrying: a timeout, a busy server, a 429 or 5xx, a
// dropped connection. It is the one mark of the temporary class: every temporary error of
// Cairn matches it, those with a meaning of their own too (an injected fault, an HTTP
// write's class), which are made with Temporary.
var ErrTemporary = errors.New("temporary")

// Temporary marks err as temporary; nil becomes ErrTemporary itself.
func Temporary(err error) error {
	switch {
	case err == nil:
		return ErrTemporary
	case errors.Is(err, ErrTemporary):
		return err
	}
	return marked{err}
}

// IsTemporary reports whether err is marked temporary.
func IsTemporary(err error) bool { return errors.Is(err, ErrTemporary) }

// marked is err marked temporary: it reads as err alone, and is both.
type marked struct{ err error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{ErrTemporary, m.err} }
