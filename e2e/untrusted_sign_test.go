package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/stepevent"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// Item 2 of issue 15: records and Cairn's own messages are authenticated. The forgeries are
// made as the attacker made them, with a service's low-privilege user of
// deploy/nats/accounts.conf, which may write any run's record.

// signer is service name's signer, from the seed cairn init or cairn dev made in the
// night's CAIRN_SIGNING_SEED_DIR: what a test writing a record as that service uses.
func (n *night) signer(name string) *identity.Signer {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, "keys", name+".seed"))
	if err != nil {
		n.t.Fatal(err)
	}
	sg, err := identity.NewSigner(name, strings.TrimSpace(string(b)))
	if err != nil {
		n.t.Fatal(err)
	}
	return sg
}

// approver registers approver name with a new seed (cairn approver add --new-seed) and
// returns the seed's file.
func (n *night) approver(name string) string {
	n.t.Helper()
	seed := filepath.Join(n.dir, "approver-"+name+".seed")
	if out, code := n.cli("approver", "add", name, "--new-seed", seed); code != 0 {
		n.t.Fatalf("cairn approver add %s (exit %d):\n%s", name, code, out)
	}
	return seed
}

// signedApprove is the data of an approve of rec's plan by name, signed with seedFile: what
// an approver publishes with nats pub.
func signedApprove(t *testing.T, rec *kc.Record, name, seedFile string) string {
	t.Helper()
	b, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	sg, err := identity.NewSigner(name, strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	sig := sg.Sign(identity.DomainApprove, identity.ApprovalMessage(rec.RunID, rec.Approval.PlanDigest))
	out, _ := json.Marshal(events.Command{By: name, Sig: &sig})
	return string(out)
}

// The forgeries on a finished night, every service as its own user:
//   - a saga intent forged with post-ledger's user asks for a reversal of -987,654,321
//     paise of an entry that stands: the undo reverses every real entry once, exactly, and
//     posts nothing of the forgery;
//   - a record forged with match's user (its unkeyed sum recomputed) makes the undone run
//     running again at compare, and compare's event is published: it is not acted on; the
//     run is handed over by its note alone and the record stays as it was forged.
func TestUntrustedSignedRecordsAndIntents(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	d := newDeployNight(t)
	d.services(allBut()...)
	d.startRun()
	d.waitRun("done", func(r *kc.Record) bool { return r.Status == kc.Done })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The forged intent, with post-ledger's user (the one that may write post-ledger's saga).
	var victim, invoice, kind, supplier string
	var line int
	if err := d.db("ledger.db").QueryRow(`SELECT key, invoice_no, line, kind, supplier_id FROM ledger_entries WHERE run_id = ? AND reverses IS NULL ORDER BY key LIMIT 1`, runID).
		Scan(&victim, &invoice, &line, &kind, &supplier); err != nil {
		t.Fatal(err)
	}
	pl, _, err := d.connect("post-ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	pljs, err := jetstream.New(pl)
	if err != nil {
		t.Fatal(err)
	}
	forgedRev, _ := json.Marshal(map[string]any{"Key": victim + ":forged", "RunID": runID, "InvoiceNo": invoice, "Line": line, "Kind": kind,
		"SupplierID": supplier, "AmountPaise": -987_654_321, "Reverses": victim})
	intent := saga.Record{Key: runID + ":INV-FORGED:1:price", RunID: runID, Step: job.PostLedger, Token: 1, Phase: saga.Intent,
		Attrs: map[string]string{job.AttrSupplier: supplier}, Payload: json.RawMessage(`{}`), Reverse: &saga.Reverse{System: job.SystemLedger, Key: victim + ":forged", Payload: forgedRev}}
	if err := saga.Publish(ctx, pljs, "/cairn/post-ledger", time.Now(), intent); err != nil {
		t.Fatalf("publishing the forged intent as post-ledger: %v", err)
	}
	d.publish(events.RunSubject(runID, events.VerbUndo), `{}`)
	d.waitRun("undone", func(r *kc.Record) bool { return r.Status == kc.Undone })
	var forged, originals, reversals, exact int
	var total int64
	if err := d.db("ledger.db").QueryRow(`SELECT count(*) FROM ledger_entries WHERE amount_paise = -987654321`).Scan(&forged); err != nil {
		t.Fatal(err)
	}
	if err := d.db("ledger.db").QueryRow(`SELECT
		(SELECT count(*) FROM ledger_entries WHERE run_id = ?1 AND reverses IS NULL),
		(SELECT count(*) FROM ledger_entries WHERE run_id = ?1 AND reverses IS NOT NULL),
		(SELECT count(*) FROM ledger_entries r JOIN ledger_entries o ON r.reverses = o.key WHERE r.run_id = ?1 AND r.amount_paise = -o.amount_paise AND r.key = o.key || ':rev'),
		(SELECT coalesce(sum(amount_paise), 0) FROM ledger_entries WHERE run_id = ?1)`, runID).Scan(&originals, &reversals, &exact, &total); err != nil {
		t.Fatal(err)
	}
	if forged != 0 || reversals != originals || exact != originals || total != 0 {
		t.Fatalf("after the undo: %d rows of -987654321, %d entries, %d reversals (%d exact negations under <key>:rev), total %d; want none forged, each entry reversed once, exactly, total 0",
			forged, originals, reversals, exact, total)
	}

	// The forged record, with match's user.
	mjs, runs := d.runsAs(ctx, job.Match)
	e, err := runs.Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := kc.Decode(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	rec.Status, rec.Lease, rec.Undo, rec.NextAction = kc.Running, nil, nil, "forged"
	for _, s := range rec.Pipeline[rec.Index(job.Compare):] {
		rec.Steps[s] = kc.NewStep()
	}
	raw, err := kc.Encode(rec) // a sum that holds: anyone who may write the bucket can make one
	if err != nil {
		t.Fatal(err)
	}
	rev, err := runs.Update(ctx, runID, raw, e.Revision())
	if err != nil {
		t.Fatalf("writing the forged record as match: %v", err)
	}
	if err := stepevent.Publish(ctx, mjs, assets.Default, "/cairn/match", runID, job.Compare, rec.Generation, rev, time.Now()); err != nil {
		t.Fatalf("publishing compare's event as match: %v", err)
	}
	handovers, err := d.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	var note runner.HandoverNote
	if !poll(time.Minute, func() bool {
		he, err := handovers.Get(ctx, runID)
		return err == nil && json.Unmarshal(he.Value(), &note) == nil && note.ID == runID+":handover:record"
	}) {
		t.Fatalf("no handover note for the forged record within a minute (note %+v): it was acted on", note)
	}
	if !strings.Contains(note.Error, kc.ErrForged.Error()) || !strings.Contains(note.Error, identity.ErrUnsigned.Error()) {
		t.Errorf("handover note error %q: want it to name the unsigned record", note.Error)
	}
	latest, err := runs.Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Revision() != rev || string(latest.Value()) != string(raw) {
		t.Fatalf("the forged record (revision %d) was written over (revision %d): it was acted on", rev, latest.Revision())
	}
	d.assertNoneRefused()
}

// An approve that names its approver but is not signed by that approver's registered key
// is refused with its reason; the signed one (cairn approve --seed) names the approver.
func TestUntrustedSignedApprove(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	n.start(approvalEnv)
	n.startRun()
	waiting := n.waitingForApproval()
	asha := n.approver("asha")
	mallory := filepath.Join(n.dir, "mallory.seed")
	seed, err := identity.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mallory, []byte(seed), 0o600); err != nil {
		t.Fatal(err)
	}
	rejected := n.rejections()
	for _, forged := range []struct{ what, body, reason string }{
		{"unsigned, typing a name", `{"by":"asha"}`, identity.ErrUnsigned.Error()},
		{"signed by another key under asha's name", signedApprove(t, waiting, "asha", mallory), identity.ErrBadSignature.Error()},
		{"signed by an approver no one registered", signedApprove(t, waiting, "mallory", mallory), identity.ErrUnknownSigner.Error()},
	} {
		n.publish(events.RunSubject(runID, events.VerbApprove), forged.body)
		seq := rejected.next()
		m, err := n.js.Stream(context.Background(), assets.StreamRejected)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		var r events.Rejected
		if err := json.Unmarshal(raw.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.Subject != events.RunSubject(runID, events.VerbApprove) || !strings.Contains(r.Reason, forged.reason) {
			t.Errorf("%s: rejected %q with %q; want the approve refused for %q", forged.what, r.Subject, r.Reason, forged.reason)
		}
	}
	rec := n.waitStatus(runLimit, kc.WaitingApproval)
	if rec.Approval == nil || rec.Approval.By != nil {
		t.Fatalf("after the forged approves: approval %+v, want it still waiting", rec.Approval)
	}
	if out, code := n.cli("approve", runID, "--by", "asha", "--seed", asha); code != 0 {
		t.Fatalf("cairn approve --by asha --seed (exit %d):\n%s", code, out)
	}
	rec = n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done || rec.Approval == nil || rec.Approval.By == nil || *rec.Approval.By != "asha" {
		t.Fatalf("status %s, approval %+v; want done, approved by asha", rec.Status, rec.Approval)
	}
	n.assertTruth()
}
