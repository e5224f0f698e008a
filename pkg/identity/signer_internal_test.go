package identity

import (
	"encoding/base64"
	"testing"

	"github.com/nats-io/nkeys"
)

// The signer's key, derived once from the seed, signs as nkeys signs with the seed: the same
// bytes, which the seed's public key verifies.
func TestSignerSignsAsNkeys(t *testing.T) {
	for range 20 {
		seed, err := NewSeed()
		if err != nil {
			t.Fatal(err)
		}
		sg, err := NewSigner("svc", seed)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := nkeys.FromSeed([]byte(seed))
		if err != nil {
			t.Fatal(err)
		}
		msg := []byte("sha256:" + seed)
		want, err := kp.Sign(signed(DomainRecord, msg))
		if err != nil {
			t.Fatal(err)
		}
		sig := sg.Sign(DomainRecord, msg)
		if got, _ := base64.RawStdEncoding.DecodeString(sig.Sig); string(got) != string(want) {
			t.Fatalf("signature %x, nkeys' %x", got, want)
		}
		if err := kp.Verify(signed(DomainRecord, msg), want); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewSigner("svc", "SUNOTASEED"); err == nil {
		t.Fatal("a bad seed made a signer")
	}
}

// BenchmarkSign: a record's signature by the signer's key, and by nkeys from the seed (what
// Sign did before: nkeys derives the key at every signature).
func BenchmarkSign(b *testing.B) {
	seed, _ := NewSeed()
	sg, _ := NewSigner("svc", seed)
	kp, _ := nkeys.FromSeed([]byte(seed))
	msg := []byte("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	b.Run("signer", func(b *testing.B) {
		for b.Loop() {
			sg.Sign(DomainRecord, msg)
		}
	})
	b.Run("nkeys", func(b *testing.B) {
		for b.Loop() {
			_, _ = kp.Sign(signed(DomainRecord, msg))
		}
	})
}
