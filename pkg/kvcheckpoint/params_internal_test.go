package kvcheckpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// The night's params keep the record's layout of the release before them, byte for byte,
// and its input fingerprint's bytes in the night's declared order.
func TestParamsKeepTheNightsLayout(t *testing.T) {
	p := StringParams(false, "warehouse", "ldh", "date", "2026-10-13")
	b, err := Encode(New("run-1", p, []string{"a"}, "2026-10-13T22:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"params":{"date":"2026-10-13","shadow":false,"warehouse":"ldh"}`; !bytes.Contains(b, []byte(want)) {
		t.Fatalf("record %s does not hold %s", b, want)
	}
	r, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Params.Equal(p) || r.Params.String("warehouse") != "ldh" || r.Params.String("date") != "2026-10-13" || r.Params.Shadow {
		t.Fatalf("decoded params %+v", r.Params)
	}
	if got, want := string(p.Ordered([]string{"warehouse", "date"})), `{"warehouse":"ldh","date":"2026-10-13","shadow":false}`; got != want {
		t.Fatalf("ordered %s, want %s (the old struct's encoding)", got, want)
	}
}

// Any pipeline's params: numbers, objects and arrays are carried as given, the record's sum
// is the same by the straight writer and by the general canonicalizer, and they decode equal.
func TestParamsOfAnyPipeline(t *testing.T) {
	p := Params{Shadow: true, Input: map[string]json.RawMessage{
		"source": json.RawMessage(`"mailbox-ap"`), "limit": json.RawMessage(`500`),
		"apis": json.RawMessage(`["geo", "credit",  "risk"]`), "window": json.RawMessage(`{"to":"2026-10-31","from":"2026-10-01"}`),
	}}
	r := New("run-2", p, []string{"a"}, "2026-10-13T22:00:00Z")
	c := getCanonical()
	defer putCanonical(c)
	if !c.canonicalRecord(r) {
		t.Fatal("the straight writer gave up on params of numbers, arrays and objects")
	}
	plain, _ := json.Marshal(r)
	if want, _ := sumOfJCS(plain); digest(c.out) != want {
		t.Fatalf("sum %s, want %s", digest(c.out), want)
	}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Params.Equal(p) || !got.Params.Shadow || got.Params.String("source") != "mailbox-ap" {
		t.Fatalf("decoded %+v, want %+v", got.Params, p)
	}
	// Members sorted, "shadow" among them; each value compacted as given (the sum, not the
	// stored bytes, is canonical).
	if !bytes.Contains(b, []byte(`"params":{"apis":["geo","credit","risk"],"limit":500,"shadow":true,"source":"mailbox-ap","window":{"to":"2026-10-31","from":"2026-10-01"}}`)) {
		t.Fatalf("record %s: params not as written", b)
	}
}

func TestParamsRefuse(t *testing.T) {
	var p Params
	for _, in := range []string{`{"shadow":"yes"}`, `[]`, `null`, `"x"`} {
		if err := json.Unmarshal([]byte(in), &p); !errors.Is(err, ErrParams) {
			t.Errorf("%s: %v, want ErrParams", in, err)
		}
	}
	bad := Params{Input: map[string]json.RawMessage{ShadowMember: json.RawMessage(`1`)}}
	if _, err := json.Marshal(bad); err == nil {
		t.Error("an input naming shadow was encoded")
	}
}
