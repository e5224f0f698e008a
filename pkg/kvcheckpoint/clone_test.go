package kvcheckpoint_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cairnhq/cairn/pkg/identity"
)

// TestCloneIsDeep: a clone equals its original and shares no pointer, slice or map with it,
// so a field added to the record without a copy in Clone fails here.
func TestCloneIsDeep(t *testing.T) {
	r := fullRecord()
	r.Sig = &identity.Sig{By: "post-ledger", Sig: "c2ln"}
	// Every output both inline and an object, so that every field is set.
	r.Snapshot.Inline = json.RawMessage(`{"a":1}`)
	full := r.Step("fetch")
	full.ParkedArtifact.Inline = json.RawMessage(`[]`)
	full.Output.Object = "run-2026-10-13-ldh/fetch/5f1c"
	r.After[r.Pipeline[0]] = []string{"a-step-before"} // no list left empty, so each copy is checked
	for _, name := range r.Pipeline {
		r.Steps[name] = r.Clone().Step("fetch")
	}
	c := r.Clone()
	if !reflect.DeepEqual(r, c) {
		t.Fatalf("clone differs:\n%+v\n%+v", r, c)
	}
	shared(t, "record", reflect.ValueOf(r), reflect.ValueOf(c))
}

// shared fails the test where a and b hold the same pointer, slice array or map, and checks
// that every nullable field of the full record is set, so that none goes unchecked.
func shared(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			t.Errorf("%s is nil in the full record: set it, so that its copy is checked", path)
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the pointer", path)
		}
		shared(t, path, a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() == 0 {
			t.Errorf("%s is empty in the full record: fill it, so that its copy is checked", path)
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the slice", path)
		}
		for i := range a.Len() {
			shared(t, path+"[]", a.Index(i), b.Index(i))
		}
	case reflect.Map:
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the map", path)
		}
		for _, k := range a.MapKeys() {
			shared(t, path+"."+k.String(), a.MapIndex(k), b.MapIndex(k))
		}
	case reflect.Struct:
		for i := range a.NumField() {
			shared(t, path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
		}
	}
}
