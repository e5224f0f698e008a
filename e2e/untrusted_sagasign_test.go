package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	job "github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/internal/undo"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/saga"
)

// Item 2 of issue 15 for saga records and outbox messages, on a finished night of the deploy
// configuration, each service its own user, mail through a real SMTP relay. The forgeries
// are made with the NATS users that may publish there (report's may queue on any run's
// outbox, post-ledger's may write post-ledger's saga records), signed with match's own
// registered key or not signed at all, so that only the signature can stop them:
//   - a forged debit note, from Cairn's sender to a supplier's mailbox, admitted by the run's
//     record, is not sent: the relay never sees it, it has no mark, and it is rejected on
//     cairn.rejected with its reason; the night's real mail went once;
//   - forged saga intents (a reversal of -987,654,321 paise of a real entry, signed by match;
//     a debit note no one sent, unsigned) and a forged outcome: cairn undo reverses every real
//     effect, exactly, and none of the forged; each forgery is rejected naming its sequence,
//     on the run's timeline too.
func TestUntrustedSagaAndOutboxSigned(t *testing.T) {
	t.Parallel()
	takeDeployNightSlot(t)
	r := startRelay(t)
	d := newDeployNight(t)
	d.services(allBut("outbox-sender")...)
	d.svcAs("outbox-sender", "CAIRN_SMTP_ADDR="+r.addr)
	d.startRun()
	d.waitRun("done", func(r *kc.Record) bool { return r.Status == kc.Done })
	d.wantOnce(r)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	match := d.signer("match")
	supplier := d.truth.DebitNotes[0].SupplierID

	t.Run("a forged message is not sent", func(t *testing.T) {
		nc, _, err := d.connect("report")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now().UTC().Round(time.Second)
		forge := func(tag string) outbox.Message {
			return outbox.Message{Key: runID + ":debit:" + supplier + ":" + tag, RunID: runID, Kind: "debit", Step: job.DebitNotes,
				Token: 1 << 40, From: "cairn@cairn.local", To: []string{job.SupplierAddress(supplier)},
				Subject: "Debit note, corrected", Body: "Pay the new account.\n", QueuedAt: at}
		}
		bySign := map[string]*identity.Signer{"by-match": match, "unsigned": nil}
		var keys []string
		for tag, sg := range bySign {
			m := forge(tag)
			keys = append(keys, m.Key)
			if err := outbox.Queue(ctx, js, m, outbox.SignedBy(sg)); err != nil {
				t.Fatalf("report queueing %s: %v", m.Key, err)
			}
		}
		// Until the sender has settled each forgery: rejected, or (what it must not do) sent.
		var refused map[string]events.Rejected
		if !poll(runLimit, func() bool {
			refused = d.rejections(t, ctx, assets.StreamOutbox)
			got, settled := r.copies(), 0
			for _, k := range keys {
				if got[k] > 0 || slices.ContainsFunc(slices.Collect(maps.Values(refused)), func(rj events.Rejected) bool { return strings.Contains(rj.Data, `"key":"`+k+`"`) }) {
					settled++
				}
			}
			return settled == len(keys)
		}) {
			t.Fatalf("rejections on %s: %+v, relay %v; want the %d forged messages settled", assets.StreamOutbox, refused, r.copies(), len(keys))
		}
		if len(refused) != len(keys) {
			t.Errorf("%d rejections on %s, want the %d forged messages", len(refused), assets.StreamOutbox, len(keys))
		}
		for _, rj := range refused {
			var m outbox.Message
			if err := json.Unmarshal([]byte(rj.Data), &m); err != nil || !slices.Contains(keys, m.Key) {
				t.Errorf("rejection %+v (%v): not one of the forged messages", rj, err)
				continue
			}
			want := identity.ErrNotAllowed.Error() // signed by match, which queues nothing
			if strings.HasSuffix(m.Key, ":unsigned") {
				want = identity.ErrUnsigned.Error()
			}
			if rj.Seq == 0 || !strings.Contains(rj.Reason, outbox.ErrForged.Error()) || !strings.Contains(rj.Reason, want) {
				t.Errorf("rejection of %s at %d: %q; want %q and %q", m.Key, rj.Seq, rj.Reason, outbox.ErrForged, want)
			}
		}
		marks, err := d.js.KeyValue(ctx, assets.BucketOutbox)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if mark, err := outbox.MarkOf(ctx, marks, runID, k); err != nil || mark != "" {
				t.Errorf("%s marked %q (%v), want no mark", k, mark, err)
			}
		}
		d.wantOnce(r) // nothing of the forgeries reached the relay
		d.assertNoneRefused()
	})

	t.Run("forged saga records are not reversed", func(t *testing.T) {
		real, _, err := saga.Effects(ctx, d.js, assets.Default, nil, runID)
		if err != nil {
			t.Fatal(err)
		}
		rec := d.record(t, runID)
		plan := len(saga.Plan(real, rec.Pipeline, saga.Scope{}))

		pl, _, err := d.connect("post-ledger")
		if err != nil {
			t.Fatal(err)
		}
		defer pl.Close()
		pljs, err := jetstream.New(pl)
		if err != nil {
			t.Fatal(err)
		}
		var victim string
		if err := d.db("ledger.db").QueryRow(`SELECT key FROM ledger_entries WHERE run_id = ? AND reverses IS NULL ORDER BY key LIMIT 1`, runID).Scan(&victim); err != nil {
			t.Fatal(err)
		}
		forgedRev, _ := json.Marshal(map[string]any{"Key": victim + ":forged", "RunID": runID, "AmountPaise": -987_654_321, "Reverses": victim})
		byMatch := saga.Record{Key: runID + ":INV-FORGED:1:price", RunID: runID, Step: job.PostLedger, Token: 1 << 40, Phase: saga.Intent,
			Attrs: map[string]string{job.AttrSupplier: supplier}, Payload: json.RawMessage(`{}`), Reverse: &saga.Reverse{System: job.SystemLedger, Key: victim + ":forged", Payload: forgedRev}}
		mailKey := runID + ":debit:" + supplier + ":never-sent"
		withdraw, _ := json.Marshal(outbox.Message{Key: mailKey + ":withdraw", RunID: runID, Kind: "withdraw", Step: job.DebitNotes,
			From: "cairn@cairn.local", To: []string{job.SupplierAddress(supplier)}, Subject: "Withdrawn", Body: "x\n", QueuedAt: time.Now().UTC()})
		unsigned := saga.Record{Key: mailKey, RunID: runID, Step: job.PostLedger, Token: 1 << 40, Phase: saga.Intent, Attrs: map[string]string{job.AttrSupplier: supplier},
			Payload: json.RawMessage(`{}`), Reverse: &saga.Reverse{System: saga.Mail, Key: mailKey + ":withdraw", Payload: withdraw}}
		// An outcome under a key of its own (a real key's outcome is a duplicate the stream drops).
		outcome := saga.Record{Key: byMatch.Key, RunID: runID, Step: job.PostLedger, Token: 1 << 40, Phase: saga.Outcome, Payload: json.RawMessage(`{}`), Outcome: "posted"}
		forgeries := []saga.Record{byMatch, unsigned, outcome}
		for i, sg := range []*identity.Signer{match, nil, match} {
			if err := saga.Publish(ctx, pljs, "/cairn/post-ledger", time.Now(), forgeries[i], saga.SignedBy(sg)); err != nil {
				t.Fatalf("publishing a forged record as post-ledger: %v", err)
			}
		}
		stored, err := events.ReadStored(ctx, d.js, assets.StreamSaga, events.SagaSubject(runID, job.PostLedger))
		if err != nil {
			t.Fatal(err)
		}
		seqs := make([]uint64, len(forgeries))
		for _, s := range stored {
			for i, f := range forgeries {
				if s.Event.ID == f.Key+":"+f.Phase {
					seqs[i] = s.Seq
				}
			}
		}
		if slices.Contains(seqs, 0) {
			t.Fatalf("forged records stored at %v: one is missing", seqs)
		}

		if out, err := d.cli(ctx, "undo", runID); err != nil {
			t.Fatalf("cairn undo %s: %v\n%s", runID, err, out)
		}
		d.waitRun("undone", func(r *kc.Record) bool { return r.Status == kc.Undone })
		done := d.record(t, runID)
		if done.Undo == nil || done.Undo.Total != plan {
			t.Errorf("undo %+v: want the %d real effects in its plan, no forged one", done.Undo, plan)
		}
		var forged, originals, reversals, exact int
		var total int64
		ledger := d.db("ledger.db")
		if err := ledger.QueryRow(`SELECT count(*) FROM ledger_entries WHERE amount_paise = -987654321 OR key LIKE '%:forged%'`).Scan(&forged); err != nil {
			t.Fatal(err)
		}
		if err := ledger.QueryRow(`SELECT
			(SELECT count(*) FROM ledger_entries WHERE run_id = ?1 AND reverses IS NULL),
			(SELECT count(*) FROM ledger_entries WHERE run_id = ?1 AND reverses IS NOT NULL),
			(SELECT count(*) FROM ledger_entries r JOIN ledger_entries o ON r.reverses = o.key WHERE r.run_id = ?1 AND r.amount_paise = -o.amount_paise AND r.key = o.key || ':rev'),
			(SELECT coalesce(sum(amount_paise), 0) FROM ledger_entries WHERE run_id = ?1)`, runID).Scan(&originals, &reversals, &exact, &total); err != nil {
			t.Fatal(err)
		}
		if forged != 0 || reversals != originals || exact != originals || total != 0 {
			t.Errorf("after the undo: %d forged rows, %d entries, %d reversals (%d exact), total %d; want none forged, each entry reversed once, exactly, total 0",
				forged, originals, reversals, exact, total)
		}
		if qty := d.scalar("erp.db", `SELECT coalesce(sum(qty_delta), 0) FROM stock_adjustments WHERE run_id = '`+runID+`'`); qty != 0 {
			t.Errorf("stock adjustments of the run sum to %d after the undo, want 0", qty)
		}
		marks, err := d.js.KeyValue(ctx, assets.BucketOutbox)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{mailKey, mailKey + ":withdraw"} {
			if mark, err := outbox.MarkOf(ctx, marks, runID, k); err != nil || mark != "" {
				t.Errorf("%s marked %q (%v): the forged mail effect was reversed", k, mark, err)
			}
		}
		refused := d.rejections(t, ctx, assets.StreamSaga)
		for i, seq := range seqs {
			want := []string{identity.ErrNotAllowed.Error(), identity.ErrUnsigned.Error(), identity.ErrNotAllowed.Error()}[i]
			rj, ok := refused[events.RejectedID(assets.StreamSaga, seq)]
			if !ok || rj.Seq != seq || rj.Stream != assets.StreamSaga || !strings.Contains(rj.Reason, want) || !strings.Contains(rj.Reason, "sequence") {
				t.Errorf("rejection of the forged saga record at %d: %+v (present %v); want its reason, %q", seq, rj, ok, want)
			}
		}
		if got := d.audit()[undo.EventSagaRefused]; got != len(seqs) {
			t.Errorf("%d %s events on the timeline, want %d", got, undo.EventSagaRefused, len(seqs))
		}
		notes, err := d.js.KeyValue(ctx, assets.BucketHandovers)
		if err != nil {
			t.Fatal(err)
		}
		var note runner.HandoverNote
		if e, err := notes.Get(ctx, runID); err != nil || json.Unmarshal(e.Value(), &note) != nil {
			t.Errorf("no handover note of the refused saga records (%v)", err)
		} else if note.ID != runID+":handover:undo:forged" || !strings.Contains(note.Error, fmt.Sprint(seqs[0])) {
			t.Errorf("handover note %+v: want %s:handover:undo:forged naming sequence %d", note, runID, seqs[0])
		}
		d.assertNoneRefused()
	})
}

// rejections are the refusals on cairn.rejected of messages of stream, by their ids.
func (d *deployNight) rejections(t *testing.T, ctx context.Context, stream string) map[string]events.Rejected {
	t.Helper()
	evs, err := events.ReadSubject(ctx, d.js, assets.StreamRejected, events.RejectedSubject)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]events.Rejected{}
	for _, e := range evs {
		var rj events.Rejected
		if e.Unmarshal(&rj) == nil && rj.Stream == stream {
			out[e.ID] = rj
		}
	}
	return out
}

// record is the checkpoint of run id as it stands.
func (d *deployNight) record(t *testing.T, id string) *kc.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := d.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := kc.Decode(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
