package ledgerapi_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
)

// keys are the services' keys registered in a cairn-keys bucket on a real embedded NATS
// server, and the ring ledger-api checks them with.
type keys struct {
	ring    *identity.Ring
	signers map[string]*identity.Signer // by service; "stranger" is registered under no name
}

// newKeys registers post-ledger's, the compensator's and the report's keys; one server
// serves every subtest of a test.
func newKeys(t *testing.T) *keys {
	t.Helper()
	js := natstest.JetStream(t)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: assets.Default.Bucket(identity.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	k := &keys{signers: map[string]*identity.Signer{}}
	for _, name := range []string{"post-ledger", "compensator", "report", "stranger"} {
		seed, err := identity.NewSeed()
		if err != nil {
			t.Fatal(err)
		}
		if k.signers[name], err = identity.NewSigner(name, seed); err != nil {
			t.Fatal(err)
		}
		if name == "stranger" {
			continue
		}
		if err := identity.Register(t.Context(), kv, name, k.signers[name].PublicKey()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := identity.SealOnce(t.Context(), kv, identity.Seal{}); err != nil {
		t.Fatal(err)
	}
	if k.ring, err = identity.OpenRing(t.Context(), js, assets.Default); err != nil {
		t.Fatal(err)
	}
	return k
}
