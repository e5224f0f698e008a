package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/lease"
)

// A lease naming an owner inbox Cairn never writes (a forged record's, aimed at another
// run's undo subject or its checkpoint key) is never asked, at startup or when the lease
// goes stale: the run is handed over at once, its note naming the inbox.
func TestSweepHandsOverALeaseWithAForeignOwnerInbox(t *testing.T) {
	for _, inbox := range []string{"cairn.runs.victim.undo", "$KV.cairn-runs.victim", "cairn.owner.a.*", "cairn.owner.b.one0000000000000000000"} {
		t.Run(inbox, func(t *testing.T) {
			f := setup(t)
			s := f.supervisor(t)
			asked := make(chan *nats.Msg, 16)
			for _, subj := range []string{inbox, sentinelSubject} {
				sub, err := f.nc.ChanSubscribe(subj, asked)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Unsubscribe() })
			}
			if err := f.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			f.create(t, "r1", nil)
			f.take(t, "r1", "a", kc.Owner{Name: "a/host/1", Inbox: inbox})
			f.observeAll(t, s)

			s.SweepOnce(f.ctx, true)

			rec := f.handedOver(t, "r1", "a", inbox)
			if st := rec.Step("a"); st.LastError == nil || !strings.Contains(*st.LastError, "foreign owner inbox") {
				t.Fatalf("last_error %v, want it to name the foreign inbox", st.LastError)
			}
			if got := counter(t, s.cfg.Metrics.Handovers.WithLabelValues("a", reasonForeignInbox)); got != 1 {
				t.Fatalf("cairn_handovers_total{reason=%s} = %v, want 1", reasonForeignInbox, got)
			}
			if err := f.nc.Publish(sentinelSubject, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-asked:
				if m.Subject != sentinelSubject {
					t.Fatalf("the supervisor sent %s a message, want nothing", m.Subject)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the sentinel did not arrive within 10s")
			}
			if ids := f.auditIDs(t, "r1", "reassigned"); len(ids) != 0 {
				t.Fatalf("reassigned %v: a forged lease is never released as an owner's", ids)
			}
		})
	}
}

// The inbox check is the runner's one: the owners it makes pass it.
func TestSweepAsksAnOwnerInboxNewOwnerMakes(t *testing.T) {
	f := setup(t)
	s := f.supervisor(t)
	f.create(t, "r1", nil)
	f.take(t, "r1", "a", lease.NewOwner(assets.Space{}, "a"))
	_, taken := f.load(t, "r1")
	f.observeAll(t, s)
	s.SweepOnce(f.ctx, true)
	f.released(t, "r1", "a", taken, "gone")
}
