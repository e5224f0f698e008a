package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/faults"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// exited says whether the night's cairn dev has ended.
func (n *night) exited() bool {
	return errors.Is(n.dev.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// record is the run's checkpoint now; nil when there is none yet or it cannot be read (the
// server lives in cairn dev, which may just have died).
func (n *night) record() *kc.Record {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, assets.BucketRuns)
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, runID)
	if err != nil {
		return nil
	}
	r, err := kc.Decode(e.Value())
	if err != nil {
		n.t.Fatal(err)
	}
	return r
}

// memoEntries is how many answers cairn-memo holds.
func (n *night) memoEntries() int {
	n.t.Helper()
	kv, err := n.js.KeyValue(context.Background(), assets.BucketMemo)
	if err != nil {
		n.t.Fatal(err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	return int(st.Values())
}

// A model call that crashes the process at the same invoice on every attempt (every
// restart dies there, having memoised nothing more) is handed over after CAIRN_LOOP_GUARD
// attempts without progress, the note naming the invoice. The first attempt memoised the 99
// invoices before it, so it counts as progress: 4 processes die, the fifth hands over.
func TestLoopGuardHandsOverAStepStuckAtOneInvoice(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newLoggedNight(t)
	docs, err := recon.ListDocuments(filepath.Join(n.dir, "inbox"), warehouse, date)
	if err != nil {
		t.Fatal(err)
	}
	stuck := docs[99].InvoiceNo
	fault := "CAIRN_FAULTS=extract.before-write.100=exit"
	deaths := 0
	for {
		n.start(fault, "CAIRN_LOOP_GUARD=3")
		if deaths == 0 {
			n.startRun()
		}
		var rec *kc.Record
		if !poll(runLimit, func() bool {
			if n.exited() {
				return true
			}
			rec = n.record()
			return rec != nil && rec.Status == kc.HandedOver
		}) {
			t.Fatalf("after %d deaths the run neither died again nor was handed over", deaths)
		}
		if !n.exited() {
			break // handed over
		}
		if code, _ := n.dev.Wait(time.Second); code != faults.ExitCode {
			t.Fatalf("cairn dev exited %d, want %d from the fault (log %s)", code, faults.ExitCode, n.dev.Log)
		}
		if deaths++; deaths > 6 {
			t.Fatalf("the run was not handed over after %d deaths at %s", deaths, stuck)
		}
	}
	rec := n.waitStatus(runLimit, kc.HandedOver)
	if deaths != 4 || rec.Step("extract").Status != kc.Failed || rec.Progress == nil ||
		*rec.Progress != (kc.Progress{Step: "extract", Count: 99, NoProgress: 3}) {
		t.Fatalf("%d deaths, extract %s, progress %+v; want 4 deaths and 3 attempts without progress from 99 answers", deaths, rec.Step("extract").Status, rec.Progress)
	}
	if m := n.memoEntries(); m != 99 {
		t.Errorf("memo holds %d answers, want the 99 before %s", m, stuck)
	}
	notes := n.handoverNotes()
	want := "3 attempts of extract made no progress (loop guard 3); stuck at " + stuck
	if len(notes) != 1 || notes[0].Step != "extract" || !strings.Contains(notes[0].Error, want) {
		t.Fatalf("notes %+v, want one for extract saying %q", notes, want)
	}
	var next string
	for _, s := range notes[0].Done.Steps {
		if s.Step == "extract" {
			next = s.Next
		}
	}
	if next != stuck {
		t.Errorf("note done %+v: the next item of extract is %q, want %s", notes[0].Done, next, stuck)
	}
}

// A 40,000-invoice night whose cairn dev is killed -9 eight times (five of them in extract,
// each after the memo has grown, then twice in post-ledger and once in update-stock, each
// after the rows have grown) is done, equal to the ground truth: every restart made
// progress, so none is a loop.
func TestKilledEightTimesDuringABigNight(t *testing.T) {
	t.Parallel()
	takeNightSlotFirst(t) // the longest of all: minutes
	began := time.Now()
	// 40,000 invoices as the issue tells it with CAIRN_E2E_FULL=1 (make e2e-full); by default a
	// night of 6,000 with the kills at the same points of its progress, so that make test stays
	// within its time on two cores.
	invoices, mismatches := 6000, 600
	if os.Getenv("CAIRN_E2E_FULL") == "1" {
		invoices, mismatches = 40000, 1000
	}
	n := newNightOf(t, invoices, mismatches, 0)
	t.Logf("generated %d invoices in %s", invoices, time.Since(began).Round(time.Millisecond))
	limit := 10 * time.Minute
	kills := []struct {
		what string
		ok   func() bool
	}{}
	for _, f := range []float64{0.075, 0.2, 0.35, 0.525, 0.725} {
		m := int(f * float64(invoices))
		kills = append(kills, struct {
			what string
			ok   func() bool
		}{fmt.Sprintf("extract, memo ≥ %d", m), func() bool { return n.memoEntries() >= m }})
	}
	rows := func(name, table string, min int) func() bool {
		db := n.db(name)
		return func() bool {
			var v int
			return db.QueryRow("SELECT count(*) FROM "+table).Scan(&v) == nil && v >= min
		}
	}
	kills = append(kills,
		struct {
			what string
			ok   func() bool
		}{"post-ledger, 30% of the mismatches' rows", rows("ledger.db", "ledger_entries", mismatches*3/10)},
		struct {
			what string
			ok   func() bool
		}{"post-ledger, 70% of the mismatches' rows", rows("ledger.db", "ledger_entries", mismatches*7/10)},
		struct {
			what string
			ok   func() bool
		}{"update-stock, half the mismatches' adjustments", rows("erp.db", "stock_adjustments", mismatches/2)},
	)
	n.start()
	n.startRun()
	for i, k := range kills {
		if !poll(limit, k.ok) {
			t.Fatalf("kill %d (%s): not reached within %s", i+1, k.what, limit)
		}
		rec := n.record()
		n.dev.Kill()
		if rec == nil || rec.Status != kc.Running {
			t.Fatalf("kill %d (%s) came too late: the run is %v", i+1, k.what, rec)
		}
		t.Logf("kill %d at %s: step %s (%s after the start)", i+1, k.what, rec.Current(), time.Since(began).Round(time.Second))
		n.start()
	}
	rec := n.waitStatus(limit, kc.Done, kc.HandedOver)
	if rec.Status != kc.Done {
		t.Fatalf("the run is %s: %s", rec.Status, rec.NextAction)
	}
	if rec.Step("extract").Attempts < 5 || rec.Restarts < 8 {
		t.Errorf("extract attempts %d, restarts %d; want at least 5 and 8", rec.Step("extract").Attempts, rec.Restarts)
	}
	if m := n.memoEntries(); m != invoices {
		t.Errorf("memo holds %d answers, want %d", m, invoices)
	}
	n.assertTruth()
	t.Logf("%d invoices, 8 kills: done and equal to the truth in %s", invoices, time.Since(began).Round(time.Second))
}
