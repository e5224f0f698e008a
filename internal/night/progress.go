package night

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
	"github.com/cairnhq/cairn/pkg/supervisor"
)

// The night's progress counters (runner.ProgressCounter): what a step made durable, read
// back from where it keeps it, for the loop guard and the handover note.

// Progress is the answers in cairn-memo for the run's documents (refusals included), and
// the first document without one.
func (s extractStep) Progress(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
	var f fetchOutput
	if err := input(ctx, a, Fetch, &f); err != nil {
		return runner.Progress{}, err
	}
	l, err := s.e.Memo.ListKeysFiltered(ctx, a.RunID+".>")
	if err != nil {
		return runner.Progress{}, fmt.Errorf("listing the memo of %s: %w", a.RunID, err)
	}
	defer func() { _ = l.Stop() }()
	have := map[string]bool{}
	for k := range l.Keys() {
		have[k] = true
	}
	v := s.e.Extractor.Versions()
	var p runner.Progress
	for _, d := range f.Documents {
		if have[memoKey(a.RunID, d.Digest, v)] {
			p.Memoised++
		} else if p.Next == "" {
			p.Next = d.InvoiceNo
		}
	}
	return p, nil
}

func tableOf(shadow bool, table string) string {
	if shadow {
		return "shadow_" + table
	}
	return table
}

// standing counts the run's keys that stand in an outside system, in write order, and
// names the first planned write that does not.
func standing(planned []string, stand []string, where string) runner.Progress {
	p := runner.Progress{Keys: len(stand), Standing: stand, Where: where}
	slices.Sort(stand)
	for _, k := range planned {
		if _, found := slices.BinarySearch(stand, k); !found {
			p.Next = k
			break
		}
	}
	return p
}

// Progress is the run's rows standing in the ledger, read back, and the first planned entry
// not among them.
func (s postLedgerStep) Progress(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
	_, writes, err := s.plan(ctx, a)
	if err != nil {
		return runner.Progress{}, err
	}
	rows, err := s.e.LedgerBook(PostLedger, a.Params.Shadow).ListRun(ctx, a.RunID)
	if err != nil {
		return runner.Progress{}, err
	}
	return standing(keysBy(writes, func(e books.Entry) string { return e.Key }), keysBy(rows, func(e books.Entry) string { return e.Key }),
		fmt.Sprintf("the ledger (CAIRN_LEDGER_DSN): SELECT key FROM %s WHERE run_id = '%s' ORDER BY key", tableOf(a.Params.Shadow, "ledger_entries"), a.RunID)), nil
}

// Progress is the run's adjustments standing in the stock store, as post-ledger's.
func (s updateStockStep) Progress(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
	_, writes, err := s.plan(ctx, a)
	if err != nil {
		return runner.Progress{}, err
	}
	rows, err := s.e.ERP.Stock(a.Params.Shadow).ListRun(ctx, a.RunID)
	if err != nil {
		return runner.Progress{}, err
	}
	return standing(keysBy(writes, func(x books.Adjustment) string { return x.Key }), keysBy(rows, func(x books.Adjustment) string { return x.Key }),
		fmt.Sprintf("the stock store (CAIRN_ERP_DSN): SELECT key FROM %s WHERE run_id = '%s' ORDER BY key", tableOf(a.Params.Shadow, "stock_adjustments"), a.RunID)), nil
}

func keysBy[T any](xs []T, key func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = key(x)
	}
	return out
}

// queued is the step's messages of this generation on the run's outbox (each key once),
// and the first planned one not among them.
func queued(ctx context.Context, a *runner.Attempt, planned []string) (runner.Progress, error) {
	msgs, err := supervisor.Queued(ctx, a.JS(), assets.Default, outboxTrust(a), a.RunID)
	if err != nil {
		return runner.Progress{}, err
	}
	var keys []string
	for _, m := range msgs {
		if m.Step == a.Step && m.Generation == a.Generation && !slices.Contains(keys, m.Key) {
			keys = append(keys, m.Key)
		}
	}
	p := standing(planned, keys, fmt.Sprintf("the outbox: nats stream view %s --subject 'cairn.outbox.%s.>'", assets.StreamOutbox, a.RunID))
	p.Messages, p.Keys = p.Keys, 0
	return p, nil
}

// Progress is the debit notes (and withdrawals) queued on the outbox.
func (s debitNotesStep) Progress(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
	p, err := s.plan(ctx, a)
	if err != nil {
		return runner.Progress{}, err
	}
	return queued(ctx, a, keysBy(p.writes, func(m outbox.Message) string { return m.Key }))
}

// Progress is the report queued on the outbox.
func (s reportStep) Progress(ctx context.Context, a *runner.Attempt) (runner.Progress, error) {
	return queued(ctx, a, []string{genKey(a.RunID+":report", a.Generation)})
}
