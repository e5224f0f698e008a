package app_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/internal/apptest"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
	"github.com/cairnhq/cairn/pkg/runner"
)

// notices sends one notice per item with Attempt.QueueWithdrawable: each with its
// withdrawal, <run>:notice:<item>:withdraw, which an undo sends in its place.
func notices(t *testing.T, relay string) app.Config {
	send := sentFunc(func(ctx context.Context, a *runner.Attempt) (*runner.Result, error) {
		var ws []runner.Withdrawable
		var keys []string
		for _, it := range strings.Split(a.Params.String("items"), ",") {
			key := a.RunID + ":notice:" + it
			ws = append(ws, runner.Withdrawable{
				Message: outbox.Message{Key: key, Kind: "notice", From: noteFrom, To: []string{it + "@example.com"},
					Subject: "Notice " + it, Body: "item " + it + " is due\n"},
				Withdrawal: outbox.Message{Key: key + ":withdraw", From: noteFrom, To: []string{it + "@example.com"},
					Subject: "Withdrawn: notice " + it, Body: "please disregard the notice of item " + it + "\n"},
				Attrs: map[string]string{"item": it},
			})
			keys = append(keys, key)
		}
		if err := a.QueueWithdrawable(ctx, ws...); err != nil {
			return nil, err
		}
		return output(keys), nil
	})
	return app.Config{
		JS: natsFor(t), KeysDir: filepath.Join(t.TempDir(), "keys"), Heartbeat: 200 * time.Millisecond, Lease: time.Second,
		TakeoverGap: 100 * time.Millisecond,
		Pipeline: pipeline.Definition{Name: "notices", Input: []string{"items"}, Steps: []pipeline.Step{
			{Name: "send", Kind: pipeline.OutsideMessage, Leased: true, Effects: "mail",
				Key: "<run>:notice:<item>, the outbox's marks", Compensation: "the withdrawal <key>:withdraw",
				Recovery: "queued again under the same keys; the outbox sends each once"},
		}},
		Steps: map[string]runner.Step{"send": send},
		Outbox: &outbox.SenderConfig{Transport: outbox.SMTPTransport{Addr: relay}, MaxBackoff: 500 * time.Millisecond,
			Allow: outbox.Allow{From: noteFrom, Mail: func(kind, to string) bool {
				return (kind == "notice" || kind == "withdraw") && strings.HasSuffix(to, "@example.com")
			}}},
	}
}

// A hosted pipeline's messages queued with their withdrawals are reversed by an undo
// through the outbox it has (no System registered): a scoped undo sends the withdrawal of
// the selected notice alone, a whole undo the rest's, each once, and a repeated undo sends
// nothing more. The run ends undone.
func TestUndoWithdrawsHostedMail(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	mb := startMailbox(t)
	cfg := notices(t, mb.addr)
	js := cfg.JS
	defer apptest.Host(ctx, t, cfg)()
	store, err := kc.Open(ctx, js, assets.MustSpace("notices").Bucket(assets.BucketRuns))
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx, js, "notices", "r-1", map[string]any{"items": "a,b,c"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := app.Wait(ctx, js, "notices", "r-1"); err != nil || rec.Status != kc.Done {
		t.Fatalf("r-1: %+v, %v; want done", rec, err)
	}
	mailed := func(want map[string]int) {
		t.Helper()
		outboxSettled(ctx, t, js, "notices")
		got := mb.counts()
		if len(got) != len(want) {
			t.Errorf("the relay received %v, want %v", got, want)
		}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("the relay received %s %d times, want %d (all: %v)", k, got[k], n, got)
			}
		}
	}
	want := map[string]int{"r-1:notice:a": 1, "r-1:notice:b": 1, "r-1:notice:c": 1}
	mailed(want)
	undo := func(id string, where map[string]string, status kc.Status) {
		t.Helper()
		var cmd events.Command
		if where != nil {
			cmd.Scope = &events.UndoScope{Where: where}
		}
		if err := app.Command(ctx, js, "notices", "r-1", events.VerbUndo, id, cmd); err != nil {
			t.Fatal(err)
		}
		rec := waitRecord(ctx, t, store, "r-1", "undo "+id+" settled", func(r *kc.Record) bool {
			return r.Undo != nil && r.Undo.RequestID == kc.RequestKey(id) && r.Lease == nil && (r.Status == status || r.Status == kc.HandedOver)
		})
		if rec.Status != status {
			t.Fatalf("undo %s: status %s, next action %q; want %s", id, rec.Status, rec.NextAction, status)
		}
	}
	undo("undo-b", map[string]string{"item": "b"}, kc.Done)
	want["r-1:notice:b:withdraw"] = 1
	mailed(want)
	undo("undo-all", nil, kc.Undone)
	want["r-1:notice:a:withdraw"], want["r-1:notice:c:withdraw"] = 1, 1
	mailed(want)
	undo("undo-again", nil, kc.Undone)
	mailed(want)
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if body := mb.bodies["r-1:notice:a:withdraw"]; !strings.Contains(body, "disregard the notice of item a") {
		t.Errorf("the withdrawal of a reads %q", body)
	}
}
