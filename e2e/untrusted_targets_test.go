package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Nothing read back becomes a target unchecked (issue 15, item 1), tried on the deploy
// configuration with the low-privilege users of deploy/nats/accounts.conf:
//   - match writes a record whose lease names the finished victim run's undo subject as its
//     owner inbox: no one asks it, the victim's ledger, stock and mail are untouched, and the
//     forged run is handed over naming the inbox;
//   - report queues notices to an internal URL and from a forged sender to a recipient of
//     its own: nothing is called, nothing is mailed, both are marked refused.
func TestUntrustedTargets(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	var adminCalls atomic.Int64
	// The configured webhook: the forged run's handover notice goes there.
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(hook.Close)
	admin := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { adminCalls.Add(1) }))
	t.Cleanup(admin.Close)

	d := newDeployNight(t)
	// The sender calls the configured webhook; the supervisor notifies the handover there.
	notify := []string{"CAIRN_NOTIFY_WEBHOOK=" + hook.URL + "/cairn", "CAIRN_NOTIFY_SECRET=s3cret"}
	// One at a time: started all at once, some exited before ready on a busy machine.
	for _, name := range allBut("outbox-sender", "supervisor") {
		if _, err := d.start(name, d.userEnv(name)); err != nil {
			t.Fatalf("%v\n%s", err, tail(filepath.Join(d.dir, name+"-1.log"), 20))
		}
	}
	d.svcAs("outbox-sender", notify...)
	d.svcAs("supervisor", notify...)
	d.startRun()
	d.waitRun("done", func(r *kc.Record) bool { return r.Status == kc.Done })
	ledger, stock := d.ledgerRows(), d.scalar("erp.db", `SELECT count(*) FROM stock_adjustments`)
	mails := d.mailKeys()

	t.Run("a forged lease's owner inbox is never asked", func(t *testing.T) {
		nc, _, err := d.connect("match")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		kv, err := js.KeyValue(ctx, assets.BucketRuns)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		forged, err := kc.Decode(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		const forgedID = "run-forged-lease"
		inbox := events.RunSubject(runID, events.VerbUndo)
		forged.RunID, forged.Status, forged.NextAction = forgedID, kc.Running, "forged"
		forged.Step("report").Status = kc.InProgress
		forged.Lease = &kc.Lease{Owner: "report/forger/1-abcdef", OwnerInbox: inbox, Token: 1, Step: "report", WriteID: "w-forged"}
		// Signed with report's own key, as a report service whose seed was stolen could: the
		// signature and the role hold (the lease names report), so only the inbox's shape
		// stands between the forgery and the victim. (Unsigned, it is refused as forged.)
		st, err := kc.Open(ctx, js, assets.BucketRuns, kc.WithSigner(d.signer("report")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(ctx, forged); err != nil {
			t.Fatalf("match writing the forged record: %v", err)
		}
		load := func(id string) *kc.Record { return d.record(t, id) }
		// Until the forged run is handed over, or the victim moves (the attack worked).
		poll(runLimit, func() bool {
			return load(forgedID).Status == kc.HandedOver || load(runID).Status != kc.Done
		})
		if v := load(runID); v.Status != kc.Done || v.Undo != nil {
			t.Fatalf("victim run: status %s, undo %+v; want done and never undone", v.Status, v.Undo)
		}
		f := load(forgedID)
		if f.Status != kc.HandedOver || f.Lease != nil || f.Handover == nil {
			t.Fatalf("forged run: status %s, lease %+v, handover %v; want handed over", f.Status, f.Lease, f.Handover)
		}
		hk, err := d.js.KeyValue(ctx, assets.BucketHandovers)
		if err != nil {
			t.Fatal(err)
		}
		ne, err := hk.Get(ctx, forgedID)
		if err != nil {
			t.Fatal(err)
		}
		var note runner.HandoverNote
		if err := json.Unmarshal(ne.Value(), &note); err != nil || !strings.Contains(note.Error, inbox) {
			t.Fatalf("handover note %+v (%v): want it to name the inbox %s", note, err, inbox)
		}
		if got := d.audit(); got["undo.started"] > 0 {
			t.Errorf("victim audit %v: an undo began", got)
		}
		if l, s := d.ledgerRows(), d.scalar("erp.db", `SELECT count(*) FROM stock_adjustments`); l != ledger || s != stock {
			t.Errorf("ledger rows %d, stock adjustments %d; want %d and %d as the victim left them", l, s, ledger, stock)
		}
		if got := d.mailKeys(); !slices.Equal(got, mails) {
			t.Errorf("mail %v, want the victim's %v", got, mails)
		}
		d.assertNoneRefused()
	})

	t.Run("a message names no target of its own", func(t *testing.T) {
		nc, _, err := d.connect("report")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		at := time.Now().UTC().Round(time.Second)
		toAdmin := outbox.Message{Key: "run-forged-hook:handover:webhook", RunID: "run-forged-hook", Kind: outbox.KindHandover, Step: "report",
			From: "cairn@cairn.local", To: []string{admin.URL + "/internal-admin"}, Subject: "x", Body: `{"grant":"admin"}`, QueuedAt: at}
		forgedMail := outbox.Message{Key: "run-forged-mail:handover:mail", RunID: "run-forged-mail", Kind: outbox.KindHandover, Step: "report",
			From: "Finance Head <ceo@cairn.local>", To: []string{"attacker@evil.example"}, Subject: "Pay this", Body: "Wire it today.\n", QueuedAt: at}
		for _, m := range []outbox.Message{toAdmin, forgedMail} {
			// Signed by report, whose notices these may be: only the addresses stop them.
			if err := outbox.Queue(ctx, js, m, outbox.SignedBy(d.signer("report"))); err != nil {
				t.Fatalf("report queueing %s: %v", m.Key, err)
			}
		}
		marks, err := d.js.KeyValue(ctx, assets.BucketOutbox)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []outbox.Message{toAdmin, forgedMail} {
			var mark outbox.Mark
			poll(runLimit, func() bool {
				mark, _ = outbox.MarkOf(ctx, marks, m.RunID, m.Key)
				return mark == outbox.Sent || mark == outbox.Refused
			})
			if mark != outbox.Refused {
				t.Errorf("%s marked %q, want refused", m.Key, mark)
			}
		}
		if n := adminCalls.Load(); n != 0 {
			t.Errorf("the internal admin endpoint got %d calls, want none", n)
		}
		h := sha256.Sum256([]byte(forgedMail.Key))
		if _, err := os.Stat(filepath.Join(d.dir, "mail", hex.EncodeToString(h[:])+".eml")); !os.IsNotExist(err) {
			t.Errorf("the forged mail's file: %v, want none written", err)
		}
		if got := d.mailKeys(); slices.Contains(got, forgedMail.Key) {
			t.Errorf("mail %v holds the forged message", got)
		}
		d.assertNoneRefused()
	})
}
