package kvcheckpoint_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// resealed applies change to the members of the stored record b and sums it again: a record
// as another release, older or newer, would have stored it.
func resealed(t *testing.T, b []byte, change func(m map[string]json.RawMessage)) []byte {
	t.Helper()
	m := members(t, b)
	change(m)
	delete(m, "sum")
	without, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := jcs.Transform(without)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(canon)
	m["sum"] = json.RawMessage(strconv.Quote("sha256:" + hex.EncodeToString(h[:])))
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// asSchema1 is r as the previous release stored it: schema 1, no updated_at.
func asSchema1(t *testing.T, r *kc.Record) []byte {
	t.Helper()
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return resealed(t, b, func(m map[string]json.RawMessage) {
		m["schema"] = json.RawMessage("1")
		m["stock_snapshot"] = m["snapshot"] // its name before schema 5
		delete(m, "snapshot")
		delete(m, "after")
		delete(m, "updated_at")
		delete(m, "progressed_at")
		delete(m, "progress")
		if string(m["approval"]) != "null" {
			var a map[string]json.RawMessage
			if err := json.Unmarshal(m["approval"], &a); err != nil {
				t.Fatal(err)
			}
			delete(a, "since")
			m["approval"], _ = json.Marshal(a)
		}
	})
}

// asSchema is the record b stored in schema v.
func asSchema(t *testing.T, b []byte, v int) []byte {
	t.Helper()
	return resealed(t, b, func(m map[string]json.RawMessage) { m["schema"] = json.RawMessage(strconv.Itoa(v)) })
}

// captured is the record the previous release (schema 1) wrote in the middle of the reference
// night: fetch to compare verified, post-ledger pending (the same as e2e/testdata/upgrade).
func captured(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/schema1.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeSchema1Upgrades(t *testing.T) {
	for name, b := range map[string][]byte{"captured": captured(t), "every field set": asSchema1(t, fullRecord())} {
		t.Run(name, func(t *testing.T) {
			var want kc.Record // the stored fields as they are, then what the upgrade adds
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if want.Schema != 1 || bytes.Contains(b, []byte(`"updated_at"`)) {
				t.Fatalf("not a schema-1 record: %s", b)
			}
			want.Schema, want.UpdatedAt, want.Commands, want.ProgressedAt = kc.Schema, want.CreatedAt, []kc.Command{}, want.CreatedAt
			var old struct {
				Snapshot *kc.Output `json:"stock_snapshot"`
			}
			if err := json.Unmarshal(b, &old); err != nil || old.Snapshot == nil {
				t.Fatalf("the schema-1 record's stock_snapshot: %v (%s)", err, b)
			}
			want.Snapshot = old.Snapshot
			if want.Approval != nil {
				want.Approval.Since = want.CreatedAt
			}
			got, err := kc.Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, &want) {
				t.Fatalf("upgraded\n%+v\nwant\n%+v", got, &want)
			}
			// Written again, it is a record of the current schema that decodes the same.
			again, err := kc.Encode(got)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			m := members(t, again)
			if string(m["schema"]) != strconv.Itoa(kc.Schema) || string(m["updated_at"]) != strconv.Quote(want.CreatedAt) {
				t.Errorf("re-encoded schema %s updated_at %s, want %d and the creation time", m["schema"], m["updated_at"], kc.Schema)
			}
			back, err := kc.Decode(again)
			if err != nil {
				t.Fatalf("Decode of the re-encoded record: %v", err)
			}
			if !reflect.DeepEqual(back, got) {
				t.Errorf("re-encoded record decodes to\n%+v\nwant\n%+v", back, got)
			}
		})
	}
}

// The sum is checked on the record as stored, before any upgrade: a schema-1 record that does
// not match its sum is corrupt, whatever was changed.
func TestDecodeSchema1BadSum(t *testing.T) {
	good := captured(t)
	replace := func(old, new string) []byte {
		if !bytes.Contains(good, []byte(old)) {
			t.Fatalf("the captured record has no %q", old)
		}
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	for name, b := range map[string][]byte{
		"changed value":                  replace(`"status":"running"`, `"status":"finishing"`),
		"changed sum":                    replace(`"sum":"sha256:`, `"sum":"sha256:0`),
		"updated_at added, sum not":      replace(`"schema":1,`, `"schema":1,"updated_at":"2026-10-13T22:00:03Z",`),
		"schema raised, sum not":         replace(`"schema":1,`, fmt.Sprintf(`"schema":%d,`, kc.Schema)),
		"newer schema claimed, sum not":  replace(`"schema":1,`, fmt.Sprintf(`"schema":%d,`, kc.Schema+1)),
		"schema 0, sum recomputed":       asSchema(t, good, 0),
		"schema missing, sum recomputed": resealed(t, good, func(m map[string]json.RawMessage) { delete(m, "schema") }),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := kc.Decode(b); !errors.Is(err, kc.ErrCorrupt) || errors.Is(err, kc.ErrNewerSchema) {
				t.Errorf("Decode = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestDecodeNewerSchema(t *testing.T) {
	good, err := kc.Encode(fullRecord())
	if err != nil {
		t.Fatal(err)
	}
	next := kc.Schema + 1
	newer := func(change func(m map[string]json.RawMessage)) []byte {
		return resealed(t, good, func(m map[string]json.RawMessage) {
			m["schema"] = json.RawMessage(strconv.Itoa(next))
			change(m)
		})
	}
	for name, b := range map[string][]byte{
		"the next schema":            newer(func(map[string]json.RawMessage) {}),
		"a field not known here":     newer(func(m map[string]json.RawMessage) { m["priority"] = json.RawMessage(`"high"`) }),
		"a field of another type":    newer(func(m map[string]json.RawMessage) { m["restarts"] = json.RawMessage(`{"count":1}`) }),
		"a schema far in the future": asSchema(t, good, 1000),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := kc.Decode(b)
			if !errors.Is(err, kc.ErrNewerSchema) || errors.Is(err, kc.ErrCorrupt) {
				t.Fatalf("Decode = %v, want ErrNewerSchema and not ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("up to schema %d", kc.Schema)) {
				t.Errorf("%q does not name the schema this release reads", err)
			}
		})
	}
	_, err = kc.Decode(newer(func(map[string]json.RawMessage) {}))
	if !strings.Contains(err.Error(), fmt.Sprintf("schema %d,", next)) {
		t.Errorf("%q does not name the record's schema %d", err, next)
	}
	// The same change in the current schema is corrupt.
	current := resealed(t, good, func(m map[string]json.RawMessage) { m["restarts"] = json.RawMessage(`{"count":1}`) })
	if _, err := kc.Decode(current); !errors.Is(err, kc.ErrCorrupt) {
		t.Errorf("Decode of a current record with a field of another type = %v, want ErrCorrupt", err)
	}
}

func TestSchema2RoundTrip(t *testing.T) {
	r := fullRecord()
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	m := members(t, b)
	if string(m["schema"]) != strconv.Itoa(kc.Schema) || string(m["updated_at"]) != strconv.Quote(r.UpdatedAt) {
		t.Fatalf("schema %s updated_at %s, want %d and %q", m["schema"], m["updated_at"], kc.Schema, r.UpdatedAt)
	}
	got, err := kc.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, r)
	}
}

// stored reads the raw entry of runID.
func (f *fixture) stored(t *testing.T, runID string) (schema, updatedAt string) {
	t.Helper()
	e, err := f.kv.Get(testContext(t), runID)
	if err != nil {
		t.Fatal(err)
	}
	m := members(t, e.Value())
	return string(m["schema"]), string(m["updated_at"])
}

// Every write stores the current schema with updated_at by the store's clock, in UTC; a
// schema-1 record is read as it is stored and upgraded by the first write.
func TestStoreWritesCurrentSchema(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	ist := time.FixedZone("IST", 5*3600+1800)
	clock := time.Date(2026, 10, 14, 3, 30, 0, 0, ist) // 22:00:00Z
	store, err := kc.Open(ctx, f.js, kc.Bucket, kc.WithClock(func() time.Time {
		clock = clock.Add(time.Second)
		return clock
	}))
	if err != nil {
		t.Fatal(err)
	}
	at := func(sec int) string { return fmt.Sprintf(`"2026-10-13T22:00:%02dZ"`, sec) }
	want := func(what, updatedAt string) {
		t.Helper()
		if s, u := f.stored(t, "run-1"); s != strconv.Itoa(kc.Schema) || u != updatedAt {
			t.Errorf("after %s: stored schema %s updated_at %s, want %d %s", what, s, u, kc.Schema, updatedAt)
		}
	}

	r := newRecord("run-1")
	r.Epoch = testEpoch
	old := asSchema1(t, r)
	rev, err := f.kv.Create(ctx, "run-1", old)
	if err != nil {
		t.Fatal(err)
	}
	rec, lrev, err := store.Load(ctx, "run-1")
	if err != nil {
		t.Fatalf("Load of a schema-1 record: %v", err)
	}
	if lrev != rev || rec.Schema != kc.Schema || rec.UpdatedAt != r.CreatedAt {
		t.Errorf("loaded revision %d schema %d updated_at %q, want %d %d %q", lrev, rec.Schema, rec.UpdatedAt, rev, kc.Schema, r.CreatedAt)
	}
	if e, _ := f.kv.Get(ctx, "run-1"); !bytes.Equal(e.Value(), old) {
		t.Errorf("reading rewrote the record: %s", e.Value())
	}

	if _, _, err := store.Mutate(ctx, "run-1", func(r *kc.Record) error { r.NextAction = "x"; return nil }); err != nil {
		t.Fatal(err)
	}
	want("Mutate", at(1))
	rec, rev, err = store.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	h, err := store.Take(ctx, rec, rev, ownerA, "fetch", nil)
	if err != nil {
		t.Fatal(err)
	}
	want("Take", at(2))
	if err := h.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	want("Renew", at(3))
	if err := h.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	want("Release", at(4))
	if _, err := store.Create(ctx, newRecord("run-2")); err != nil {
		t.Fatal(err)
	}
	if s, u := f.stored(t, "run-2"); s != strconv.Itoa(kc.Schema) || u != at(5) {
		t.Errorf("after Create: stored schema %s updated_at %s, want %d %s", s, u, kc.Schema, at(5))
	}
}

// A record of a newer release is refused by every read and never written.
func TestStoreNewerSchema(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	r := newRecord("run-1")
	r.Epoch = testEpoch
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	newer := asSchema(t, b, kc.Schema+1)
	rev, err := f.kv.Create(ctx, "run-1", newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.store.Load(ctx, "run-1"); !errors.Is(err, kc.ErrNewerSchema) {
		t.Errorf("Load = %v, want ErrNewerSchema", err)
	}
	if _, _, err := f.store.LoadAuthoritative(ctx, "run-1"); !errors.Is(err, kc.ErrNewerSchema) {
		t.Errorf("LoadAuthoritative = %v, want ErrNewerSchema", err)
	}
	if _, _, err := f.store.Mutate(ctx, "run-1", func(r *kc.Record) error { r.NextAction = "x"; return nil }); !errors.Is(err, kc.ErrNewerSchema) {
		t.Errorf("Mutate = %v, want ErrNewerSchema", err)
	}
	e, err := f.kv.Get(ctx, "run-1")
	if err != nil || e.Revision() != rev || e.Operation() != jetstream.KeyValuePut || !bytes.Equal(e.Value(), newer) {
		t.Errorf("the newer record was written: revision %d (%v), want %d unchanged", e.Revision(), err, rev)
	}
}

// A record of an earlier schema that only encoding/json decodes (here an escape the fast
// decoder leaves to it) keeps its snapshot, stored under its old name.
func TestOldSnapshotThroughTheSlowDecoder(t *testing.T) {
	b := resealed(t, asSchema1(t, fullRecord()), func(m map[string]json.RawMessage) {
		m["next_action"] = json.RawMessage(`"caf\u00e9 \ud83d\ude00"`)
	})
	got, err := kc.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Snapshot == nil || got.Snapshot.Object != fullRecord().Snapshot.Object || got.NextAction != "café 😀" {
		t.Fatalf("decoded snapshot %+v, next action %q; want %+v", got.Snapshot, got.NextAction, fullRecord().Snapshot)
	}
}
