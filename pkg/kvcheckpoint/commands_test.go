package kvcheckpoint_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// A waiting command is kept once, bounded in count and size, ends its wait when applied, and
// survives encoding; long request ids never fill the record.
func TestWaitingCommands(t *testing.T) {
	r := newRecord("run-1")
	long := strings.Repeat("x", 500)
	if added, err := r.Wait(kc.Command{Verb: "undo", RequestID: long, By: strings.Repeat("b", 300), At: "2026-10-13T23:00:00Z", Args: json.RawMessage(`{"scope":{"supplier":"SUP-07"}}`)}); !added || err != nil {
		t.Fatalf("Wait = %t, %v", added, err)
	}
	if added, err := r.Wait(kc.Command{Verb: "undo", RequestID: long}); added || err != nil {
		t.Fatalf("the same request again: Wait = %t, %v, want false, nil", added, err)
	}
	c := r.Waiting(long)
	if c == nil || len(c.RequestID) > 64 || len(c.By) != 64 || c.RequestID != kc.RequestKey(long) || kc.RequestKey(c.RequestID) != c.RequestID {
		t.Fatalf("waiting command %+v: want its request id by digest (≤ 64 bytes, stable) and by cut to 64", c)
	}
	for i := 2; i <= kc.MaxCommands; i++ {
		if _, err := r.Wait(kc.Command{Verb: "resume", RequestID: fmt.Sprint("r-", i)}); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	if _, err := r.Wait(kc.Command{Verb: "resume", RequestID: "one-too-many"}); !errors.Is(err, kc.ErrTooManyCommands) {
		t.Fatalf("command %d: %v, want ErrTooManyCommands", kc.MaxCommands+1, err)
	}
	if _, err := r.Wait(kc.Command{Verb: "resume", RequestID: "big", Args: json.RawMessage(`"` + strings.Repeat("a", 300) + `"`)}); !errors.Is(err, kc.ErrTooManyCommands) {
		t.Fatalf("a command with 300 bytes of data: %v, want ErrTooManyCommands", err)
	}
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kc.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Commands, r.Commands) {
		t.Fatalf("decoded commands %+v, want %+v", got.Commands, r.Commands)
	}
	r.AddRequest(long) // applied: no longer waiting, recorded by its digest
	if r.Waiting(long) != nil || !r.HasRequest(long) || len(r.Commands) != kc.MaxCommands-1 {
		t.Fatalf("after AddRequest: waiting %+v, has %t, %d waiting", r.Waiting(long), r.HasRequest(long), len(r.Commands))
	}
	for _, id := range r.Requests {
		if len(id) > 64 {
			t.Fatalf("requests keep %d bytes of one id", len(id))
		}
	}
}

// A schema-2 record (the previous release) has no commands: the upgrade adds none waiting.
func TestDecodeSchema2Upgrades(t *testing.T) {
	b, err := kc.Encode(fullRecord())
	if err != nil {
		t.Fatal(err)
	}
	old := resealed(t, b, func(m map[string]json.RawMessage) {
		m["schema"] = json.RawMessage("2")
		delete(m, "commands")
	})
	got, err := kc.Decode(old)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got.Schema != kc.Schema || got.Commands == nil || len(got.Commands) != 0 {
		t.Fatalf("upgraded: schema %d, commands %#v; want %d and none", got.Schema, got.Commands, kc.Schema)
	}
}

// A schema-3 record has no progressed_at, approval.since or progress: they read as the
// record's last write, and null.
func TestDecodeSchema3Upgrades(t *testing.T) {
	r := fullRecord()
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	old := resealed(t, b, func(m map[string]json.RawMessage) {
		m["schema"] = json.RawMessage("3")
		delete(m, "progressed_at")
		delete(m, "progress")
		m["approval"] = json.RawMessage(`{"at":null,"by":null,"plan_digest":"sha256:aa","step":"post-ledger"}`)
	})
	got, err := kc.Decode(old)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got.Schema != kc.Schema || got.ProgressedAt != r.UpdatedAt || got.Approval == nil || got.Approval.Since != r.UpdatedAt || got.Progress != nil {
		t.Fatalf("upgraded: schema %d, progressed_at %q, approval %+v, progress %+v; want %d, %q, since %q, null",
			got.Schema, got.ProgressedAt, got.Approval, got.Progress, kc.Schema, r.UpdatedAt, r.UpdatedAt)
	}
}
