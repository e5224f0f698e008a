package httpidem

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
)

// ContentDigest is the Content-Digest field value of body: RFC 9530's sha-256 member.
func ContentDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// CheckDigest checks a Content-Digest field value against body. The value is a list of
// algorithm=:base64: members (RFC 9530); its sha-256 member must be there and match.
// Other algorithms are ignored.
func CheckDigest(value string, body []byte) error {
	var found bool
	for member := range strings.SplitSeq(value, ",") {
		alg, v, ok := strings.Cut(strings.TrimSpace(member), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(alg), "sha-256") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) < 2 || v[0] != ':' || v[len(v)-1] != ':' {
			return fmt.Errorf("the sha-256 member %q is not a byte sequence (:base64:): %w", v, ErrDigestMismatch)
		}
		got, err := base64.StdEncoding.DecodeString(v[1 : len(v)-1])
		if err != nil {
			return fmt.Errorf("the sha-256 member is not base64: %w", ErrDigestMismatch)
		}
		sum := sha256.Sum256(body)
		if subtle.ConstantTimeCompare(got, sum[:]) != 1 {
			return fmt.Errorf("the body's sha-256 is %s, the field says %s: %w",
				base64.StdEncoding.EncodeToString(sum[:]), v[1:len(v)-1], ErrDigestMismatch)
		}
		found = true
	}
	if !found {
		return fmt.Errorf("no sha-256 member in %q: %w", value, ErrDigestMismatch)
	}
	return nil
}
