package identity_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
)

// The admin registers each service's public key (cairn init); a service signs what it
// writes with its own seed; a reader checks the signature against the registered key, so a
// writer who holds no seed cannot pass for the service, nor change what it signed.
func ExampleRing_VerifyMsg() {
	dir, _ := os.MkdirTemp("", "identity-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	assets.Ensure(ctx, js, assets.Config{Steps: []string{"post"}})
	seeds := filepath.Join(dir, "seeds") // each service's own secret
	seal, _ := identity.RegisterSeeds(ctx, js, assets.Default, seeds, "post")

	post, _ := identity.SignerFrom(seeds, "post")
	saga := func(body string) *nats.Msg {
		return &nats.Msg{Subject: "cairn.saga.run-7.post", Data: []byte(body), Header: nats.Header{}}
	}
	m := saga(`{"key":"run-7:row-1"}`)
	post.SignMsg(identity.DomainSaga, m)

	ring, _ := identity.OpenRing(ctx, js, assets.Default)
	check := func(what string, m *nats.Msg, domain string) {
		by, err := ring.VerifyMsg(ctx, domain, m, seal.Saga+1, seal.Saga)
		fmt.Printf("%s: by %q, refused %t\n", what, by, identity.Refused(err))
	}
	check("signed by post", m, identity.DomainSaga)
	check("the same signature as an outbox message", m, identity.DomainOutbox)

	changed := saga(`{"key":"run-7:row-2"}`)
	changed.Header = m.Header
	check("its body changed", changed, identity.DomainSaga)

	seed, _ := identity.NewSeed()
	impostor, _ := identity.NewSigner("post", seed)
	forged := saga(`{"key":"run-7:row-1"}`)
	impostor.SignMsg(identity.DomainSaga, forged)
	_, err := ring.VerifyMsg(ctx, identity.DomainSaga, forged, seal.Saga+1, seal.Saga)
	fmt.Println("signed as post with another seed:", errors.Is(err, identity.ErrBadSignature))
	_, err = ring.VerifyMsg(ctx, identity.DomainSaga, saga(`{}`), seal.Saga+1, seal.Saga)
	fmt.Println("unsigned, past the seal:", errors.Is(err, identity.ErrUnsigned))
	// Output:
	// signed by post: by "post", refused false
	// the same signature as an outbox message: by "", refused true
	// its body changed: by "", refused true
	// signed as post with another seed: true
	// unsigned, past the seal: true
}
