package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
)

// The owner inbox a lease may name is the one NewOwner writes: under the owner prefix of
// the run's pipeline and the service the lease's owner names, ending in a nuid (or, for a
// lease of an earlier release in flight, the prefix every pipeline shared). Everything else
// is foreign, another pipeline's inbox included.
func TestCheckInboxAcceptsOnlyTheShapeNewOwnerWrites(t *testing.T) {
	t.Parallel()
	night, enrich, other := assets.Space{}, assets.MustSpace("enrich"), assets.MustSpace("other")
	for _, sp := range []assets.Space{night, enrich} {
		for _, service := range []string{"post-ledger", "compensator", "a_b", "x"} {
			o := lease.NewOwner(sp, service)
			if err := lease.CheckInbox(sp, kc.Lease{Owner: o.Name, OwnerInbox: o.Inbox}); err != nil {
				t.Errorf("NewOwner(%q, %q) = %+v: %v, want accepted", sp.Name(), service, o, err)
			}
		}
	}
	if o := lease.NewOwner(night, "fetch"); o.Inbox[:len("cairn.owner.fetch.")] != "cairn.owner.fetch." {
		t.Errorf("the night's owner inbox %q, want cairn.owner.fetch.<nuid> as before", o.Inbox)
	}
	mine := lease.NewOwner(enrich, "upload")
	if want := "cairn.enrich.owner.upload."; mine.Inbox[:len(want)] != want {
		t.Errorf("enrich's owner inbox %q, want under %s", mine.Inbox, want)
	}
	legacy := kc.Lease{Owner: mine.Name, OwnerInbox: "cairn.owner.upload." + mine.Inbox[len("cairn.enrich.owner.upload."):]}
	if err := lease.CheckInbox(enrich, legacy); err != nil {
		t.Errorf("a lease of an earlier release (inbox %q): %v, want accepted", legacy.OwnerInbox, err)
	}
	if err := lease.CheckInbox(other, kc.Lease{Owner: mine.Name, OwnerInbox: mine.Inbox}); !errors.Is(err, lease.ErrForeignInbox) {
		t.Errorf("enrich's owner inbox on a run of pipeline other: %v, want %v", err, lease.ErrForeignInbox)
	}
	own := lease.NewOwner(night, "post-ledger")
	id := own.Inbox[len("cairn.owner.post-ledger."):]
	for _, l := range []kc.Lease{
		{Owner: own.Name, OwnerInbox: "cairn.runs.run-victim.undo"},
		{Owner: own.Name, OwnerInbox: "$KV.cairn-runs.run-victim"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.post-ledger.*"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.post-ledger.>"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.>"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.match." + id},                  // another service's prefix
		{Owner: own.Name, OwnerInbox: "cairn.enrich.owner.post-ledger." + id},     // another pipeline's
		{Owner: "match/h/1-abcdef", OwnerInbox: own.Inbox},                        // an owner of another service
		{Owner: own.Name, OwnerInbox: own.Inbox + ".x"},                           // a deeper subject
		{Owner: own.Name, OwnerInbox: own.Inbox[:len(own.Inbox)-1]},               // not a nuid
		{Owner: own.Name, OwnerInbox: own.Inbox[:len(own.Inbox)-1] + "-"},         // not base 62
		{Owner: own.Name, OwnerInbox: "_INBOX.cairn.post-ledger." + id},           // a reply inbox
		{Owner: "cairn.runs.x/h/1", OwnerInbox: "cairn.owner.cairn.runs.x." + id}, // a service of several tokens
		{Owner: "*/h/1", OwnerInbox: "cairn.owner.*." + id},
		{Owner: "/h/1", OwnerInbox: "cairn.owner.." + id},
		{Owner: own.Name, OwnerInbox: ""},
	} {
		if err := lease.CheckInbox(night, l); !errors.Is(err, lease.ErrForeignInbox) {
			t.Errorf("CheckInbox(owner %q, inbox %q) = %v, want %v", l.Owner, l.OwnerInbox, err, lease.ErrForeignInbox)
		}
	}
}

// OwnerGone never sends a foreign inbox anything, so a forged lease cannot make the asker
// publish on a stream's subject or a KV key; it proves nothing, and the owner is not gone.
func TestOwnerGoneNeverAsksAForeignInbox(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	nc := js.Conn()
	got := make(chan *nats.Msg, 16)
	const victim, sentinel = "cairn.runs.run-victim.undo", "test.sentinel"
	for _, subj := range []string{victim, sentinel} {
		sub, err := nc.ChanSubscribe(subj, got)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	own := lease.NewOwner(assets.Space{}, "post-ledger")
	if lease.OwnerGone(t.Context(), nc, assets.Space{}, kc.Lease{Owner: own.Name, OwnerInbox: victim, Token: 7, Step: "report"}, 10*time.Millisecond) {
		t.Fatal("OwnerGone on a foreign inbox: true, want false")
	}
	// A sentinel published now arrives after anything OwnerGone published before it.
	if err := nc.Publish(sentinel, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Subject != sentinel {
			t.Fatalf("OwnerGone sent %s a message, want nothing", m.Subject)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sentinel did not arrive within 10s")
	}
	// The inbox NewOwner makes, with nobody answering, is asked and proves its owner gone.
	if !lease.OwnerGone(t.Context(), nc, assets.Space{}, kc.Lease{Owner: own.Name, OwnerInbox: own.Inbox}, 10*time.Millisecond) {
		t.Fatal("OwnerGone on an owner inbox nobody answers: false, want true")
	}
}
