package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// Same key, different payload: a ledger row that already holds one of the run's keys with
// another amount makes the write fail with an error naming both; the run is handed over,
// never silently skipped, and the row is left as it was.
func TestSameKeyDifferentPayloadHandsOver(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	ctx := context.Background()
	db, err := books.Open(ctx, "sqlite:"+filepath.Join(n.dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	adjs := slices.Clone(n.truth.Adjustments)
	slices.SortFunc(adjs, func(a, b recon.TruthAdjustment) int {
		return strings.Compare(runID+":"+a.KeySuffix, runID+":"+b.KeySuffix)
	})
	a := adjs[23] // the 24th write in key order
	key := runID + ":" + a.KeySuffix
	wrong := a.AmountPaise + 100
	ledger := n.db("ledger.db")
	if _, err := ledger.Exec(`INSERT INTO ledger_entries(key, run_id, invoice_no, line, kind, supplier_id, amount_paise, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, '2026-10-13T21:00:00Z')`, key, runID, a.InvoiceNo, a.Line, a.Kind, a.SupplierID, wrong); err != nil {
		t.Fatal(err)
	}

	n.start()
	n.startRun()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || rec.Step("post-ledger").Status != kc.Failed {
		t.Fatalf("status %s, post-ledger %s; want handed_over at post-ledger", rec.Status, rec.Step("post-ledger").Status)
	}
	for _, s := range []string{"update-stock", "debit-notes", "report"} {
		if st := rec.Step(s).Status; st != kc.Pending {
			t.Errorf("step %s is %s after the handover, want pending", s, st)
		}
	}
	kv, err := n.js.KeyValue(ctx, assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, runID)
	if err != nil {
		t.Fatalf("handover note: %v", err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{key, fmt.Sprintf("amount_paise=%d", wrong), fmt.Sprintf("amount_paise=%d", a.AmountPaise)} {
		if !strings.Contains(note.Error, want) {
			t.Errorf("note error %q does not name %q", note.Error, want)
		}
	}
	if note.Step != "post-ledger" || note.ID != *rec.Handover {
		t.Errorf("note %+v", note)
	}
	var amount int64
	var rows int
	if err := ledger.QueryRow(`SELECT amount_paise FROM ledger_entries WHERE key = ?`, key).Scan(&amount); err != nil || amount != wrong {
		t.Errorf("the conflicting row holds %d (%v), want it untouched at %d", amount, err, wrong)
	}
	if err := ledger.QueryRow(`SELECT count(*) FROM ledger_entries`).Scan(&rows); err != nil || rows != 24 {
		t.Errorf("ledger rows %d (%v), want the 23 written before the conflict and the conflicting one", rows, err)
	}
}

// A debit note's text changed under its key between a crash in debit-notes and the restart
// (here: one of its adjustments, as the record names compare's output, was changed while
// nothing ran). The restart's note is refused before it is queued: the run is handed over
// naming the key and the digests of both texts, the outbox holds only the first text, and
// the supplier got that one, once.
func TestChangedDebitNoteAfterCrashHandsOver(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newLoggedNight(t)
	n.crash(job.DebitNotes + ".after-write.1=exit@once")

	var first outbox.Message
	var changed recon.DebitNote
	n.withServer(func(jetstream.KeyValue) {
		ctx := context.Background()
		js := n.storageJS()
		msgs, err := supervisor.Queued(ctx, js, assets.Default, nil, runID)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || msgs[0].Kind != "debit" {
			t.Fatalf("queued before the crash: %+v, want one debit note", msgs)
		}
		first = msgs[0]
		supplier := strings.TrimPrefix(first.Key, runID+":debit:")

		store, err := kc.Open(ctx, js, assets.BucketRuns, kc.WithSigner(n.signer("supervisor"))) // a person's change, through the supervisor's key
		if err != nil {
			t.Fatal(err)
		}
		arts, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
		if err != nil {
			t.Fatal(err)
		}
		rec, _, err := store.Load(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		b, err := arts.Load(ctx, rec.Step(job.Compare).Output)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Adjustments []recon.Adjustment `json:"adjustments"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		at := slices.IndexFunc(out.Adjustments, func(a recon.Adjustment) bool { return a.SupplierID == supplier })
		if at < 0 {
			t.Fatalf("no adjustment of %s in compare's output", supplier)
		}
		out.Adjustments[at].AmountPaise += 100
		for _, note := range recon.DebitNotes(out.Adjustments) {
			if note.SupplierID == supplier {
				changed = note
			}
		}
		if b, err = json.Marshal(out); err != nil {
			t.Fatal(err)
		}
		o, err := arts.Save(ctx, runID, job.Compare, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Mutate(ctx, runID, func(r *kc.Record) error {
			r.Step(job.Compare).Output = o
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	again := first
	again.Subject, again.Body = recon.DebitNoteText(runID, warehouse, date, changed)
	if outbox.Digest(again) == outbox.Digest(first) {
		t.Fatal("the change left the note's text as it was")
	}

	n.start()
	rec := n.waitStatus(runLimit, kc.HandedOver, kc.Done)
	if rec.Status != kc.HandedOver || rec.Step(job.DebitNotes).Status != kc.Failed {
		t.Fatalf("status %s, debit-notes %s; want handed_over at debit-notes", rec.Status, rec.Step(job.DebitNotes).Status)
	}
	kv, err := n.js.KeyValue(context.Background(), assets.BucketHandovers)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), runID)
	if err != nil {
		t.Fatalf("handover note: %v", err)
	}
	var note runner.HandoverNote
	if err := json.Unmarshal(e.Value(), &note); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{first.Key, outbox.Digest(first), outbox.Digest(again)} {
		if !strings.Contains(note.Error, want) {
			t.Errorf("note error %q does not name %q", note.Error, want)
		}
	}
	if note.Step != job.DebitNotes || note.ID != *rec.Handover {
		t.Errorf("note %+v", note)
	}

	// Nothing with the new text reached the outbox; the first text is delivered, once.
	msgs, err := supervisor.Queued(context.Background(), n.js, assets.Default, nil, runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Key == first.Key && outbox.Digest(m) != outbox.Digest(first) {
			t.Errorf("the outbox holds %s with the changed text (token %d)", m.Key, m.Token)
		}
		if m.Kind == "debit" && m.Key != first.Key {
			t.Errorf("the outbox holds %s, queued after the refused note", m.Key)
		}
	}
	mail := n.waitMail(first.Key, runLimit)
	if !strings.Contains(mail, first.Subject) || strings.Contains(mail, again.Subject) {
		t.Errorf("the mail of %s is not the first text:\n%s", first.Key, mail)
	}
	var copies int
	for _, f := range n.mailFiles() {
		if strings.Contains(f, first.Key) {
			copies++
		}
	}
	if copies != 1 {
		t.Errorf("%d mails name %s, want 1", copies, first.Key)
	}
}

// waitMail waits until the mail of key is marked sent and returns its file.
func (n *night) waitMail(key string, limit time.Duration) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, assets.BucketOutbox)
	if err != nil {
		n.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, outbox.MarkKey(runID, key))
	if err != nil {
		n.t.Fatal(err)
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil || outbox.Mark(e.Value()) != outbox.Sent {
			continue
		}
		h := sha256.Sum256([]byte(key))
		b, err := os.ReadFile(filepath.Join(n.dir, "mail", hex.EncodeToString(h[:])+".eml"))
		if err != nil {
			n.t.Fatalf("the mail of %s is marked sent: %v", key, err)
		}
		return string(b)
	}
	n.t.Fatalf("the mail of %s was not sent within %s (log %s)", key, limit, n.dev.Log)
	return ""
}
