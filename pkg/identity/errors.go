package identity

import "errors"

var (
	// ErrUnsigned: the value carries no signature.
	ErrUnsigned = errors.New("not signed")
	// ErrBadSignature: the signature is not the named signer's signature of the value.
	ErrBadSignature = errors.New("signature does not hold")
	// ErrUnknownSigner: no key is registered for the name the signature carries.
	ErrUnknownSigner = errors.New("signer not registered")
	// ErrNotAllowed: the signer holds its key but may not make this change.
	ErrNotAllowed = errors.New("signer may not write this")
	// ErrBadSeed: a seed that is not an nkey seed.
	ErrBadSeed = errors.New("bad signing seed")
	// ErrNoSeal: cairn-keys has no seal yet (run cairn init).
	ErrNoSeal = errors.New("no seal recorded")
)
