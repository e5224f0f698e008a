package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/ledgerapi"
	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/httpidem"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// The night with its ledger over HTTP: services/ledger-api over the night's ledger.db,
// and CAIRN_LEDGER_URL for post-ledger and the compensator. The tests read the ledger's
// rows from the same file, so every check of the SQL night holds over HTTP unchanged.

// overHTTP starts the night's ledger-api and makes every later process of the night
// write the ledger through it.
func (n *night) overHTTP() *ledgerAPI {
	n.t.Helper()
	// It reads its callers' keys from the night's NATS once cairn dev has registered them.
	api := startLedgerAPI(n.t, anyAddr, "CAIRN_DATA_DIR="+n.dir, "CAIRN_NATS_URL="+n.url)
	n.env = append(n.env, "CAIRN_LEDGER_URL="+api.url)
	return api
}

// adjustmentsByKey is the night's adjustments in key order, the order post-ledger writes.
func (n *night) adjustmentsByKey() []recon.TruthAdjustment {
	adjs := slices.Clone(n.truth.Adjustments)
	slices.SortFunc(adjs, func(a, b recon.TruthAdjustment) int { return strings.Compare(a.KeySuffix, b.KeySuffix) })
	return adjs
}

// receipts are the receipts post-ledger's saga outcomes carry, by key.
func (n *night) receipts() map[string]saga.Receipt {
	n.t.Helper()
	stored, err := events.ReadStored(context.Background(), n.js, assets.StreamSaga, events.SagaSubject(runID, job.PostLedger))
	if err != nil {
		n.t.Fatal(err)
	}
	out := map[string]saga.Receipt{}
	for _, s := range stored {
		var r saga.Record
		if err := s.Event.Unmarshal(&r); err != nil {
			n.t.Fatal(err)
		}
		if rc, ok := saga.ReceiptOf(r); ok {
			out[r.Key] = rc
		}
	}
	return out
}

// The reference night over HTTP gives the ledger of the ground truth, each write's
// receipt on the saga; then an undo for one supplier reverses exactly its entries
// through the API, and a second undo reverses nothing.
func TestHTTPLedgerNightAndUndo(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newLoggedNight(t)
	n.overHTTP()
	n.start()
	n.startRun()
	rec := n.waitStatus(runLimit, kc.Done)
	n.assertNight(rec, 0)
	rcs := n.receipts()
	if len(rcs) != len(n.truth.Adjustments) {
		t.Errorf("%d post-ledger outcomes carry a receipt, want one per entry (%d)", len(rcs), len(n.truth.Adjustments))
	}
	for _, a := range n.truth.Adjustments {
		key := runID + ":" + a.KeySuffix
		rc := rcs[key]
		if rc.Status != http.StatusCreated || rc.Reference != "/v1/entries/"+key || !strings.HasPrefix(rc.AnswerDigest, "sha256:") {
			t.Errorf("receipt of %s: %+v, want 201 at /v1/entries/%s with the answer's digest", key, rc, key)
			break
		}
	}
	if keys := n.scalar("ledger.db", `SELECT count(*) FROM http_idempotency_keys`); keys != len(n.truth.Adjustments) {
		t.Errorf("the ledger API holds %d idempotency keys, want one per entry (%d)", keys, len(n.truth.Adjustments))
	}

	sup, adjs := n.supplierWithMost()
	// The first undo names the supplier by its flag, the second by the attribute.
	for round, scope := range [][]string{{"--supplier", sup}, {"--attr", "supplier=" + sup}} {
		if out, code := n.cli(append(append([]string{"undo", runID}, scope...), "--wait")...); code != 0 {
			t.Fatalf("cairn undo exited %d:\n%s", code, out)
		}
		rec = n.undone(kc.Done)
		if want := []int{rec.Undo.Total, 0}[round]; rec.Undo.Reversed != want {
			t.Errorf("undo %d reversed %d of %d effects, want %d", round+1, rec.Undo.Reversed, rec.Undo.Total, want)
		}
		n.assertSupplierUndone(sup, adjs)
	}
}

// The crash matrix over HTTP, sampled where the ledger API is written: each crashed and
// restarted night leaves what the uninterrupted SQL night leaves.
func TestHTTPLedgerCrashMatrix(t *testing.T) {
	t.Parallel() // beside the waiting tests; its nights take the night slots
	want, truth := referenceNight(t)
	list := []string{
		job.PostLedger + "." + faults.BeforeWrite + ".24=exit@once", // the crash at entry 24
		job.PostLedger + "." + faults.LostReply + ".24=exit@once",
		fmt.Sprintf("%s.%s.%d=exit@once", job.PostLedger, faults.AfterWrite, len(truth.Adjustments)),
		job.PostLedger + "." + faults.BeforeCommit + "=exit@once",
	}
	runMatrixOf(t, want, list, func(n *night) { n.overHTTP() })
}

// Someone wrote the key of the run's 24th entry with another amount through the API
// while the run was down: the restarted run's write of it is refused with 422, and the
// run is handed over naming the key, the row left as it was.
func TestHTTPLedgerChangedPayloadHandsOver(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newLoggedNight(t)
	api := n.overHTTP()
	fault := job.PostLedger + "." + faults.BeforeWrite + ".24=exit@once"
	n.crash(fault)
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != 23 {
		t.Fatalf("after the crash the ledger holds %d rows, want 23", rows)
	}
	// The dead worker's fence, as the ledger holds it (NATS went down with cairn dev).
	var epoch string
	var token int64
	if err := n.db("ledger.db").QueryRow(`SELECT epoch, token FROM fences WHERE run_id = ?`, runID).Scan(&epoch, &token); err != nil {
		t.Fatal(err)
	}
	a := n.adjustmentsByKey()[23]
	key := runID + ":" + a.KeySuffix
	wrong := a.AmountPaise + 100
	body, _ := json.Marshal(map[string]any{"run_id": runID, "invoice_no": a.InvoiceNo, "line": a.Line, "kind": a.Kind,
		"supplier_id": a.SupplierID, "amount_paise": wrong, "reverses": nil})
	req, err := http.NewRequest(http.MethodPost, api.url+"/v1/entries", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := httpidem.FormatKey(key)
	req.Header.Set(httpidem.KeyHeader, k)
	req.Header.Set(httpidem.DefaultRunHeader, runID)
	req.Header.Set(httpidem.DefaultTokenHeader, strconv.FormatInt(token, 10))
	req.Header.Set(ledgerapi.EpochHeader, epoch)
	sg, err := identity.SignerFrom(filepath.Join(n.dir, "keys"), job.PostLedger)
	if err != nil {
		t.Fatal(err)
	}
	httpidem.Sign(req, body, sg, time.Now(), ledgerapi.EpochHeader)
	if status, b, _ := api.do(req); status != http.StatusCreated {
		t.Fatalf("the other write: %d %s", status, b)
	}

	n.start("CAIRN_FAULTS=" + fault)
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || rec.Step(job.PostLedger).Status != kc.Failed {
		t.Fatalf("status %s, post-ledger %s; want handed_over at post-ledger", rec.Status, rec.Step(job.PostLedger).Status)
	}
	note := n.handoverNote()
	if !strings.Contains(note.Error, key) || !strings.Contains(note.Error, "422") || note.Step != job.PostLedger {
		t.Errorf("handover note %+v: want post-ledger's 422 naming %s", note, key)
	}
	if amount := n.scalar("ledger.db", `SELECT amount_paise FROM ledger_entries WHERE key = '`+key+`'`); int64(amount) != wrong {
		t.Errorf("the other write's row holds %d, want it untouched at %d", amount, wrong)
	}
	if rows := n.scalar("ledger.db", `SELECT count(*) FROM ledger_entries`); rows != 24 {
		t.Errorf("ledger rows %d, want the 23 of the run and the other write", rows)
	}
}

// handoverNote is the run's note in cairn-handovers.
func (n *night) handoverNote() runner.HandoverNote {
	n.t.Helper()
	ctx := context.Background()
	kv, err := n.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		n.t.Fatal(err)
	}
	e, err := kv.Get(ctx, runID)
	if err != nil {
		n.t.Fatalf("handover note: %v", err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil {
		n.t.Fatal(err)
	}
	return note
}

// The ledger API is down when post-ledger starts and stays down for a minute: the step
// waits for it under its heartbeat (CAIRN_LEDGER_OUTAGE), nothing is handed over or
// restarted, and the run finishes with the ground truth's ledger once the API is back.
func TestHTTPLedgerDownForAMinute(t *testing.T) {
	t.Parallel() // mostly waiting for the outage to end
	n := newLoggedNight(t)
	addr, err := freeAddrOn(outageHost)
	if err != nil {
		t.Fatal(err)
	}
	n.env = append(n.env, "CAIRN_LEDGER_URL=http://"+addr)
	n.start()
	n.startRun()
	n.waitRecord(runLimit, "post-ledger started", func(r *kc.Record) bool { return r.Step(job.PostLedger).Status != kc.Pending })
	// The outage's length is the scenario, not a wait for something to happen.
	<-time.After(time.Minute)
	rec := n.waitRecord(time.Second, "the run", func(*kc.Record) bool { return true })
	if rec.Status != kc.Running || rec.Step(job.PostLedger).Status != kc.InProgress || rec.Restarts != 0 {
		t.Fatalf("after a minute without the ledger: run %s, post-ledger %s, restarts %d; want post-ledger waiting in its first attempt",
			rec.Status, rec.Step(job.PostLedger).Status, rec.Restarts)
	}
	startLedgerAPI(t, addr, "CAIRN_DATA_DIR="+n.dir, "CAIRN_NATS_URL="+n.url)
	rec = n.waitStatus(runLimit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done {
		t.Fatalf("status %s once the ledger was back, want done", rec.Status)
	}
	n.assertNight(rec, 0)
	if a := rec.Step(job.PostLedger).Attempts; a != 0 {
		t.Errorf("post-ledger failed %d attempts, want none: the outage is waited out within the attempt", a)
	}
}

// A zombie over HTTP: post-ledger's process is stopped in the middle of the step, another
// instance finishes the night, and the zombie, continued, is fenced (its next entry is
// refused by the ledger API's fence, 409, unless its heartbeat finds the lease gone first):
// counted as fenced, and the ledger is the ground truth's.
func TestHTTPLedgerZombie(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	h := newProcsNight(t)
	h.overHTTP()
	h.zombie()
}
