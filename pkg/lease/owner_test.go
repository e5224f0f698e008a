package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/internal/natstest"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
)

// The owner inbox a lease may name is the one NewOwner writes: under the owner prefix of
// the service the lease's owner names, ending in a nuid. Everything else is foreign.
func TestCheckInboxAcceptsOnlyTheShapeNewOwnerWrites(t *testing.T) {
	t.Parallel()
	for _, service := range []string{"post-ledger", "compensator", "a_b", "x"} {
		o := lease.NewOwner(service)
		if err := lease.CheckInbox(kc.Lease{Owner: o.Name, OwnerInbox: o.Inbox}); err != nil {
			t.Errorf("NewOwner(%q) = %+v: %v, want accepted", service, o, err)
		}
	}
	own := lease.NewOwner("post-ledger")
	id := own.Inbox[len("cairn.owner.post-ledger."):]
	for _, l := range []kc.Lease{
		{Owner: own.Name, OwnerInbox: "cairn.runs.run-victim.undo"},
		{Owner: own.Name, OwnerInbox: "$KV.cairn-runs.run-victim"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.post-ledger.*"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.post-ledger.>"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.>"},
		{Owner: own.Name, OwnerInbox: "cairn.owner.match." + id},                  // another service's prefix
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
		if err := lease.CheckInbox(l); !errors.Is(err, lease.ErrForeignInbox) {
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
	own := lease.NewOwner("post-ledger")
	if lease.OwnerGone(t.Context(), nc, kc.Lease{Owner: own.Name, OwnerInbox: victim, Token: 7, Step: "report"}, 10*time.Millisecond) {
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
	if !lease.OwnerGone(t.Context(), nc, kc.Lease{Owner: own.Name, OwnerInbox: own.Inbox}, 10*time.Millisecond) {
		t.Fatal("OwnerGone on an owner inbox nobody answers: false, want true")
	}
}
