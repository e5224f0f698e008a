package kvcheckpoint_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// fullRecord has every field of the record set, none left empty.
func fullRecord() *kc.Record {
	r := newRecord("run-2026-10-13-ldh")
	r.Epoch = testEpoch
	r.UpdatedAt = "2026-10-14T01:02:03.456Z"
	r.Status = kc.WaitingApproval
	r.SourceFingerprint = kc.Ptr("sha256:5f1c")
	r.Snapshot = &kc.Output{Object: "run-2026-10-13-ldh/compare/77ab", Digest: "SHA-256=d9", Size: 9120}
	r.Lease = &kc.Lease{Owner: ownerA.Name, OwnerInbox: ownerA.Inbox, Token: 1876, Step: "post-ledger", WriteID: "w-19c2"}
	r.NextAction = "post 40 ledger adjustments for run-2026-10-13-ldh, then update stock"
	r.Restarts = 1
	r.Generation = 2
	r.AddRequest("start-1")
	r.Approval = &kc.Approval{Step: "post-ledger", PlanDigest: "sha256:aa", Since: "2026-10-13T22:40:00Z", By: kc.Ptr("asha"), At: kc.Ptr("2026-10-13T23:00:00Z"), Sig: kc.Ptr("c2ln")}
	r.ProgressedAt = "2026-10-13T22:40:00Z"
	r.Progress = &kc.Progress{Step: "post-ledger", Count: 12, NoProgress: 1}
	r.Handover = kc.Ptr("h-1")
	r.After = kc.Graph{}
	for i, name := range r.Pipeline { // each after the one before, written out
		r.After[name] = append([]string{}, r.Pipeline[max(i-1, 0):i]...)
	}
	r.Undo = &kc.Undo{RequestID: "undo-1", Scope: json.RawMessage(`{"steps":["post-ledger"]}`), Cursor: 3, Reversed: 2, Total: 40, PreviousStatus: kc.Running}
	if _, err := r.Wait(kc.Command{Verb: "resume", RequestID: "resume-1", By: "/cairn/cli", At: "2026-10-13T23:01:00Z", Args: json.RawMessage(`{"after_fix":true}`)}); err != nil {
		panic(err)
	}
	s := r.Step("fetch")
	s.Status = kc.Verified
	s.StartedAt = kc.Ptr("2026-10-13T22:00:04Z")
	s.FinishedAt = kc.Ptr("2026-10-13T22:00:09Z")
	s.Output = &kc.Output{Inline: json.RawMessage(`{"documents":41}`), Digest: "SHA-256=Xq", Size: 16}
	s.InputFingerprint = kc.Ptr("sha256:5f1c")
	s.Versions = kc.Versions{Code: kc.Ptr("v0.1.0"), Prompt: kc.Ptr("lines-v3"), Schema: kc.Ptr("line-items-v1"), Model: kc.Ptr("rules-1")}
	s.Token = kc.Ptr(uint64(1202))
	s.Effects = &kc.Effects{Keys: 40, IntentsOpen: 1}
	s.Parked = []kc.Parked{{Item: "INV-20261013-0117", Reason: "no line items found"}}
	s.ParkedCount = 1
	s.ParkedArtifact = &kc.Output{Object: "run-2026-10-13-ldh/fetch/parked", Digest: "SHA-256=pp", Size: 2048}
	s.SetLastError("owner post-ledger/host-7/4120 gone (no responders)")
	return r
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for name, r := range map[string]*kc.Record{"fresh": newRecord("run-1"), "full": fullRecord()} {
		t.Run(name, func(t *testing.T) {
			b, err := kc.Encode(r)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := kc.Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("Decode(Encode(r)) differs from r\n got %+v\nwant %+v", got, r)
			}
			again, err := kc.Encode(got)
			if err != nil {
				t.Fatalf("Encode again: %v", err)
			}
			if !bytes.Equal(again, b) {
				t.Errorf("encoding is not stable:\n%s\n%s", b, again)
			}
		})
	}
}

// keys returns the member names of a JSON object.
func keys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s: %v", raw, err)
	}
	return slices.Sorted(maps.Keys(m))
}

func members(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s: %v", raw, err)
	}
	return m
}

func sorted(s ...string) []string { return slices.Sorted(slices.Values(s)) }

// TestEncodeFieldsOfDesign pins the member names of DESIGN.md, "The checkpoint record": every
// field is always present, null or empty when it has no value.
func TestEncodeFieldsOfDesign(t *testing.T) {
	recordKeys := sorted("schema", "run_id", "params", "created_at", "epoch", "status", "pipeline", "steps",
		"source_fingerprint", "snapshot", "lease", "next_action", "restarts", "generation", "requests",
		"approval", "handover", "undo", "commands", "updated_at", "progressed_at", "progress", "after", "prev", "sum")
	stepKeys := sorted("status", "attempts", "started_at", "finished_at", "output", "input_fingerprint", "versions",
		"token", "effects", "parked", "parked_count", "parked_artifact", "last_error")
	versionKeys := sorted("code", "prompt", "schema", "model")

	t.Run("empty", func(t *testing.T) {
		b, err := kc.Encode(newRecord("run-1"))
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		rec := members(t, b)
		if got := keys(t, b); !slices.Equal(got, recordKeys) {
			t.Fatalf("record members = %v, want %v", got, recordKeys)
		}
		for _, k := range []string{"source_fingerprint", "snapshot", "lease", "approval", "handover", "undo", "progress", "after"} {
			if string(rec[k]) != "null" {
				t.Errorf("%s = %s, want null", k, rec[k])
			}
		}
		want := map[string]string{"schema": fmt.Sprint(kc.Schema), "updated_at": `"2026-10-13T22:00:03Z"`, "status": `"running"`, "next_action": `""`, "restarts": "0",
			"generation": "0", "requests": "[]", "commands": "[]", "params": `{"date":"2026-10-13","shadow":false,"warehouse":"ldh"}`}
		for k, v := range want {
			if string(rec[k]) != v {
				t.Errorf("%s = %s, want %s", k, rec[k], v)
			}
		}
		steps := members(t, rec["steps"])
		if got := slices.Sorted(maps.Keys(steps)); !slices.Equal(got, sorted(pipeline...)) {
			t.Fatalf("steps = %v, want the pipeline %v", got, pipeline)
		}
		for name, raw := range steps {
			if got := keys(t, raw); !slices.Equal(got, stepKeys) {
				t.Fatalf("step %s members = %v, want %v", name, got, stepKeys)
			}
			s := members(t, raw)
			for _, k := range []string{"started_at", "finished_at", "output", "input_fingerprint", "token", "effects", "parked_artifact", "last_error"} {
				if string(s[k]) != "null" {
					t.Errorf("step %s: %s = %s, want null", name, k, s[k])
				}
			}
			if string(s["status"]) != `"pending"` || string(s["attempts"]) != "0" || string(s["parked"]) != "[]" || string(s["parked_count"]) != "0" {
				t.Errorf("step %s = %s, want pending with no attempts and nothing parked", name, raw)
			}
			if string(s["versions"]) != `{"code":null,"model":null,"prompt":null,"schema":null}` {
				t.Errorf("step %s: versions = %s, want every version null", name, s["versions"])
			}
		}
	})

	t.Run("full", func(t *testing.T) {
		b, err := kc.Encode(fullRecord())
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		rec := members(t, b)
		for k, want := range map[string][]string{
			"params":   sorted("warehouse", "date", "shadow"),
			"lease":    sorted("owner", "owner_inbox", "token", "step", "write_id"),
			"approval": sorted("step", "plan_digest", "since", "by", "at", "sig"),
			"progress": sorted("step", "count", "no_progress"),
			"undo":     sorted("request_id", "scope", "cursor", "reversed", "total", "previous_status"),
			"snapshot": sorted("object", "digest", "size"),
		} {
			if got := keys(t, rec[k]); !slices.Equal(got, want) {
				t.Errorf("%s members = %v, want %v", k, got, want)
			}
		}
		fetch := members(t, members(t, rec["steps"])["fetch"])
		for k, want := range map[string][]string{
			"output":          sorted("inline", "digest", "size"),
			"parked_artifact": sorted("object", "digest", "size"),
			"versions":        versionKeys,
			"effects":         sorted("keys", "intents_open"),
		} {
			if got := keys(t, fetch[k]); !slices.Equal(got, want) {
				t.Errorf("fetch.%s members = %v, want %v", k, got, want)
			}
		}
		var parked []map[string]json.RawMessage
		if err := json.Unmarshal(fetch["parked"], &parked); err != nil || len(parked) != 1 {
			t.Fatalf("fetch.parked = %s, want one item", fetch["parked"])
		}
		if got := slices.Sorted(maps.Keys(parked[0])); !slices.Equal(got, sorted("item", "reason")) {
			t.Errorf("parked item members = %v, want [item reason]", got)
		}
	})
}

// TestEncodeSum checks the sum against an independent computation: sha256 of the RFC 8785 form
// of the record with "sum" removed.
func TestEncodeSum(t *testing.T) {
	b, err := kc.Encode(fullRecord())
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	stored, _ := m["sum"].(string)
	delete(m, "sum")
	without, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	canon, err := jcs.Transform(without)
	if err != nil {
		t.Fatalf("jcs: %v", err)
	}
	h := sha256.Sum256(canon)
	if want := "sha256:" + hex.EncodeToString(h[:]); stored != want {
		t.Errorf("sum = %q, want %q", stored, want)
	}
}

// A record is stored in its RFC 8785 form, sum included: what is summed is what is stored.
func TestEncodeStoresTheCanonicalForm(t *testing.T) {
	for name, r := range map[string]*kc.Record{"full": fullRecord(), "new": kc.New("run-1", kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"fetch", "report"}, "2026-10-13T22:00:03Z")} {
		b, err := kc.Encode(r)
		if err != nil {
			t.Fatalf("%s: Encode: %v", name, err)
		}
		canon, err := jcs.Transform(b)
		if err != nil {
			t.Fatalf("%s: jcs: %v", name, err)
		}
		if !bytes.Equal(canon, b) {
			t.Errorf("%s: stored\n%s\nits canonical form\n%s", name, b, canon)
		}
	}
}

// An inline output is stored with the bytes its digest covers, not reordered: the rest of
// the record is canonical, the output as the step wrote it.
func TestEncodeKeepsInlineOutputBytes(t *testing.T) {
	r := kc.New("run-1", kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"fetch"}, "2026-10-13T22:00:03Z")
	inline := json.RawMessage(`{"zeta":1,"alpha":"a\u003cb","list":[3,1]}`)
	r.Step("fetch").Output = &kc.Output{Inline: inline, Digest: "SHA-256=x", Size: int64(len(inline))}
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, inline) {
		t.Fatalf("stored %s, want the inline output %s byte for byte", b, inline)
	}
	got, err := kc.Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !bytes.Equal(got.Step("fetch").Output.Inline, inline) {
		t.Fatalf("decoded inline %s, want %s", got.Step("fetch").Output.Inline, inline)
	}
}

// TestEncodeSumIgnoresStaleSum: a record that carries an old sum is summed without it.
func TestEncodeSumIgnoresStaleSum(t *testing.T) {
	r := fullRecord()
	first, err := kc.Encode(r)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	r.Sum = "sha256:stale"
	second, err := kc.Encode(r)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if !bytes.Equal(first, second) {
		t.Errorf("a stale sum changed the encoding:\n%s\n%s", first, second)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	good, err := kc.Encode(fullRecord())
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	replace := func(old, new string) []byte {
		if !bytes.Contains(good, []byte(old)) {
			t.Fatalf("encoding has no %q", old)
		}
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	noSum := members(t, good)
	delete(noSum, "sum")
	noSumBytes, _ := json.Marshal(noSum)
	schema := func(v int) []byte {
		b, _ := kc.Encode(func() *kc.Record { r := fullRecord(); r.Schema = v; return r }())
		return b
	}
	missingStep, _ := kc.Encode(func() *kc.Record { r := fullRecord(); delete(r.Steps, "report"); return r }())

	for name, b := range map[string][]byte{
		"changed byte in a value": replace(`"warehouse":"ldh"`, `"warehouse":"ldx"`),
		"changed number":          replace(`"restarts":1`, `"restarts":2`),
		"changed sum":             replace(`"sum":"sha256:`, `"sum":"sha256:0`),
		"no sum":                  noSumBytes,
		"truncated":               good[:len(good)-1],
		"not an object":           []byte(`[1,2]`),
		"null":                    []byte(`null`),
		"schema 0":                schema(0),
		"negative schema":         schema(-1),
		"no schema":               resealed(t, good, func(m map[string]json.RawMessage) { delete(m, "schema") }),
		"schema not a number":     resealed(t, good, func(m map[string]json.RawMessage) { m["schema"] = json.RawMessage(`"2"`) }),
		"pipeline step missing":   missingStep,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := kc.Decode(b); !errors.Is(err, kc.ErrCorrupt) {
				t.Errorf("Decode = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestDecodeEveryByte changes each byte of a stored record in turn: no change goes unnoticed.
func TestDecodeEveryByte(t *testing.T) {
	good, err := kc.Encode(newRecord("run-1"))
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		if _, err := kc.Decode(b); !errors.Is(err, kc.ErrCorrupt) {
			t.Fatalf("byte %d changed (%q): Decode = %v, want ErrCorrupt", i, b[max(0, i-10):min(len(b), i+10)], err)
		}
	}
}

func TestSetLastErrorBounded(t *testing.T) {
	s := kc.NewStep()
	s.SetLastError(strings.Repeat("x", kc.MaxLastError+100))
	if len(*s.LastError) != kc.MaxLastError {
		t.Errorf("last_error is %d bytes, want %d", len(*s.LastError), kc.MaxLastError)
	}
}

func FuzzDecode(f *testing.F) {
	good, err := kc.Encode(fullRecord())
	if err != nil {
		f.Fatalf("Encode: %v", err)
	}
	f.Add(good)
	if old, err := os.ReadFile("testdata/schema1.json"); err == nil {
		f.Add(old)
	}
	f.Add([]byte(`{"sum":"sha256:00"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := kc.Decode(b)
		if err != nil {
			if !errors.Is(err, kc.ErrCorrupt) && !errors.Is(err, kc.ErrNewerSchema) {
				t.Fatalf("Decode error %v is neither ErrCorrupt nor ErrNewerSchema", err)
			}
			return
		}
		again, err := kc.Encode(r)
		if err != nil {
			return // a valid record may still be too large to write
		}
		r2, err := kc.Decode(again)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(b))): %v", err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("decode, encode, decode is not stable")
		}
	})
}
