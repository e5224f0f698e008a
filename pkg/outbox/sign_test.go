package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/outbox"
)

func newSigner(t *testing.T, name string) *identity.Signer {
	t.Helper()
	seed, err := identity.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	sg, err := identity.NewSigner(name, seed)
	if err != nil {
		t.Fatal(err)
	}
	return sg
}

// A sender with a trust sends a message only when the service that may queue it signed it
// with its registered key, or it is unsigned at or below the seal. Any other is rejected
// with its reason before any mark is written, so a forgery of a real message's key neither
// sends nor blocks the real one behind it.
func TestSignedMessages(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	dn, rep, sup, impostor := newSigner(t, "debit-notes"), newSigner(t, "report"), newSigner(t, "supervisor"), newSigner(t, "debit-notes")
	ring := identity.NewRing(map[string]string{"debit-notes": dn.PublicKey(), "report": rep.PublicKey(), "supervisor": sup.PublicKey()}, identity.Seal{Outbox: 1})
	trust := &outbox.Trust{Ring: ring, Kinds: map[string][]string{"debit-notes": {"debit", "withdraw"}, "report": {"report"}}}

	old := message("run-s", "debit", "run-s:debit:SUP-00")
	real := message("run-s", "debit", "run-s:debit:SUP-01")
	forgedCopy := real
	forgedCopy.Token, forgedCopy.Body = real.Token+1, "Pay the attacker.\n" // the real key, another text
	byReport := message("run-s", "debit", "run-s:debit:SUP-02")
	unsigned := message("run-s", "debit", "run-s:debit:SUP-03")
	byImpostor := message("run-s", "debit", "run-s:debit:SUP-04")
	requeuedByStep := message("run-s", "debit", "run-s:debit:SUP-05")
	requeuedByStep.Requeue = 99
	requeued := message("run-s", "debit", "run-s:debit:SUP-06")
	requeued.Requeue = 99
	notice := message("run-s", outbox.KindHandover, "run-s:handover:report:x:mail")
	notice.Step = "report"
	wrongKind := message("run-s", "report", "run-s:report")

	queue := []struct {
		m    outbox.Message
		by   *identity.Signer
		sent bool
		why  error
	}{
		{old, nil, true, nil}, // seq 1: the seal's
		{forgedCopy, rep, false, identity.ErrNotAllowed},
		{real, dn, true, nil},
		{byReport, rep, false, identity.ErrNotAllowed},
		{unsigned, nil, false, identity.ErrUnsigned},
		{byImpostor, impostor, false, identity.ErrBadSignature},
		{requeuedByStep, dn, false, identity.ErrNotAllowed},
		{requeued, sup, true, nil},
		{notice, sup, true, nil},
		{wrongKind, dn, false, identity.ErrNotAllowed},
	}
	for _, q := range queue {
		if err := outbox.Queue(testContext(t), f.js, q.m, outbox.SignedBy(q.by)); err != nil {
			t.Fatalf("Queue %q: %v", q.m.Key, err)
		}
	}
	var mu sync.Mutex
	rejected := map[uint64]error{}
	s := f.sender(t, outbox.SenderConfig{Transport: outbox.FileTransport{Dir: dir}, Trust: trust,
		Rejected: func(_ context.Context, msg jetstream.Msg, reason error) {
			mu.Lock()
			defer mu.Unlock()
			meta, _ := msg.Metadata()
			rejected[meta.Sequence.Stream] = reason
		}})
	for i, q := range queue {
		err := s.Handle(testContext(t), next(t, f.cons))
		switch {
		case q.sent && err != nil:
			t.Errorf("%d %s: %v, want it sent", i+1, q.m.Key, err)
		case !q.sent && (!errors.Is(err, outbox.ErrForged) || !errors.Is(err, q.why)):
			t.Errorf("%d %s: %v, want it refused as %v", i+1, q.m.Key, err, q.why)
		case !q.sent:
			if r := rejected[uint64(i+1)]; r == nil || !strings.Contains(r.Error(), "sequence") {
				t.Errorf("%d %s: rejected with %v, want the reason naming its sequence", i+1, q.m.Key, r)
			}
		}
	}
	for _, q := range queue {
		want := outbox.Mark("")
		if q.sent {
			want = outbox.Sent
		}
		if q.m.Key == real.Key {
			continue // the forgery's key is the real one's: sent by the real message
		}
		if got := f.markOf(t, q.m); got != want {
			t.Errorf("%s marked %q, want %q", q.m.Key, got, want)
		}
	}
	if got := f.markOf(t, real); got != outbox.Sent {
		t.Errorf("the real message behind its forgery marked %q, want sent", got)
	}
	if got := emlFiles(t, dir); len(got) != 4 {
		t.Errorf("%d mails written (%v), want the 4 allowed", len(got), got)
	}
	if len(rejected) != 6 {
		t.Errorf("%d rejections, want 6: %v", len(rejected), rejected)
	}
}
