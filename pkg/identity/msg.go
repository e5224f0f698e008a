package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// HeaderSig is the header that carries the signature of a stream message (a saga record, an
// outbox message): "<by> <signature>", the signer's name and its unpadded base64 ed25519
// signature. A header, not a field of the body: the body stays the value as it was (readers
// that refuse unknown fields still decode it, `nats stream view` shows it unchanged), and the
// signature shows on its own line there.
const HeaderSig = "Cairn-Sig"

// maxSigHeader bounds the header a reader parses: a name and 86 characters of base64.
const maxSigHeader = 256

// msgDigest is what a stream message's signature covers: its subject and the sha256 of its
// body, so that a signature is bound to the subject it was published on and stays small
// whatever the size of the body.
func msgDigest(subject string, data []byte) []byte {
	sum := sha256.Sum256(data)
	return []byte(subject + "\nsha256:" + hex.EncodeToString(sum[:]))
}

// SignMsg sets m's HeaderSig to s's signature, in domain, of m's subject and body.
func (s *Signer) SignMsg(domain string, m *nats.Msg) {
	sig := s.Sign(domain, msgDigest(m.Subject, m.Data))
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(HeaderSig, sig.By+" "+sig.Sig)
}

// MsgSig reads the signature of a stream message from its header: nil when it has none, an
// error wrapping ErrBadSignature when the header is not "<by> <signature>".
func MsgSig(h nats.Header) (*Sig, error) {
	v := h[HeaderSig]
	if len(v) == 0 {
		return nil, nil
	}
	if len(v) > 1 || len(v[0]) > maxSigHeader {
		return nil, fmt.Errorf("%w: header %s is not one signature", ErrBadSignature, HeaderSig)
	}
	by, sig, ok := strings.Cut(v[0], " ")
	if !ok || sig == "" || !signerName(by) {
		return nil, fmt.Errorf("%w: header %s is not \"<by> <signature>\"", ErrBadSignature, HeaderSig)
	}
	return &Sig{By: by, Sig: sig}, nil
}

// VerifyMsg checks the signature of a stream message stored at seq on a stream whose seal
// is sealed (the stream's last sequence when cairn init first registered keys): it returns
// who signed it, checked against the registered key, or "" for an unsigned message at or
// below the seal (the previous release's). An unsigned message past the seal is ErrUnsigned.
// Whether the signer may have written it is the caller's to check.
func (r *Ring) VerifyMsg(ctx context.Context, domain string, m *nats.Msg, seq, sealed uint64) (string, error) {
	sig, err := MsgSig(m.Header)
	if err != nil {
		return "", err
	}
	if sig == nil {
		if seq != 0 && seq <= sealed {
			return "", nil
		}
		return "", fmt.Errorf("%w (sequence %d, past the seal's %d)", ErrUnsigned, seq, sealed)
	}
	if err := r.Verify(ctx, domain, msgDigest(m.Subject, m.Data), sig); err != nil {
		return "", err
	}
	return sig.By, nil
}

// signerName: a service's or approver's name, as cairn-keys holds it (no dots or wildcards
// that would make its key another one).
func signerName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Refused reports whether err is a verdict on a value (unsigned, a signature that does not
// hold, an unknown signer, a signer not allowed), not a failure to reach the keys: a reader
// refuses the value for good on a verdict and tries again later on anything else.
func Refused(err error) bool {
	return errors.Is(err, ErrUnsigned) || errors.Is(err, ErrBadSignature) || errors.Is(err, ErrUnknownSigner) || errors.Is(err, ErrNotAllowed)
}
