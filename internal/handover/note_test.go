package handover

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The notes' wire form and texts are what people and notifiers read: pinned here.
func TestNoteTexts(t *testing.T) {
	t.Parallel()
	if got := ID("r1", "fetch", "7"); got != "r1:handover:fetch:7" {
		t.Errorf("ID = %q", got)
	}
	if got, want := ResumeOrUndo("r1", "r1"), "a person decides: cairn resume r1, cairn resume r1 --after-fix, or cairn undo r1"; got != want {
		t.Errorf("ResumeOrUndo = %q, want %q", got, want)
	}
	n := Untrusted(assets.Default, "r1", "fetch", errors.New("sum mismatch"), "2026-01-02T03:04:05Z")
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"r1:handover:record","run_id":"r1","step":"fetch","error":"sum mismatch","done":{"keys":0,"messages":0,"steps":null},` +
		`"next_action":"inspect the checkpoint (nats kv get cairn-runs r1); it was not resumed and nothing was written","at":"2026-01-02T03:04:05Z"}`
	if string(b) != want {
		t.Errorf("untrusted note\n got %s\nwant %s", b, want)
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	r := &kc.Record{}
	Name(r, Note{ID: "r1:handover:fetch:7", NextAction: "a person decides"})
	if r.Handover == nil || *r.Handover != "r1:handover:fetch:7" || r.NextAction != "a person decides" {
		t.Errorf("record names %v, %q", r.Handover, r.NextAction)
	}
}
