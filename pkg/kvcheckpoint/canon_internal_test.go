package kvcheckpoint

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// canonSeeds are documents the fast path must sum exactly as the general path does, or give
// up on.
var canonSeeds = []string{
	`{}`,
	`{"sum":"sha256:00"}`,
	`{"b":1,"a":[1,2,{"d":null,"c":true}],"sum":"x"}`,
	` { "z" : "a\"b\\c\/d\b\f\n\r\t" , "y":"\u0001\u001f\u007f\u00e9\u2028\u20ac" } `,
	`{"s":"<>&\u003c\u003e\u0026","t":"héllo wörld ✓"}`,
	`{"n":[0,-1,123456789012345,-123456789012345,1234567890123456,1.5,1e3,-0,0.0,01]}`,
	`{"dup":1,"dup":2}`,
	`{"sum":"a","sum":"b"}`,
	`{"é":1,"e":2}`,
	`{"a":"\ud83d\ude00","b":"\ud83d"}`,
	`{"a":"` + "\xff" + `"}`,
	`{"a":[],"b":{},"c":[[],[{}]]}`,
	`[1,2]`, `null`, `"x"`, `{"a":1}x`, `{"a":}`, `{"a":tru}`, `{"a":1,}`, `{"a" 1}`,
	`{"a":"` + strings.Repeat("x", 300) + `"}`,
}

func FuzzCanonical(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s))
	}
	r := New("run-1", StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"a", "b"}, "2026-10-13T22:00:03Z")
	r.Step("a").Output = &Output{Inline: json.RawMessage(`{"z":[1,"\u00e9<"],"a":{"y":null}}`), Digest: "SHA-256=x", Size: 30}
	b, err := Encode(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		c := getCanonical()
		defer putCanonical(c)
		if !c.canonicalize(b) {
			return
		}
		fast := digest(c.out)
		slow, err := sumOfJCS(b)
		if err != nil {
			t.Fatalf("the fast path summed %q, the general path refuses it: %v", b, err)
		}
		if fast != slow {
			t.Fatalf("%q: fast sum %s, general %s; canonical %s", b, fast, slow, c.out)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("the fast path accepted %q, which is no JSON object: %v", b, err)
		}
		var stored string
		if c.hasSum {
			if err := json.Unmarshal(m["sum"], &stored); err != nil || stored != string(c.sum) {
				t.Fatalf("%q: sum %q, the general path reads %q (%v)", b, c.sum, stored, err)
			}
		}
	})
}

// TestCanonicalTakesRecords: the fast path sums every record this package writes.
func TestCanonicalTakesRecords(t *testing.T) {
	r := New("run-1", StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"a", "b"}, "2026-10-13T22:00:03Z")
	r.Step("a").Output = &Output{Inline: json.RawMessage(`{"z":[1,"\u00e9<"],"a":{"y":null}}`), Digest: "SHA-256=x", Size: 30}
	r.Step("a").SetLastError("owner \"x\" gone\n<now>")
	r.Lease = &Lease{Owner: "o", OwnerInbox: "i", Token: 123456789012345, Step: "a", WriteID: "w"}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	c := getCanonical()
	defer putCanonical(c)
	if !c.canonicalize(b) {
		t.Fatalf("the fast path gave up on a record: %s", b)
	}
}

func BenchmarkCanonical(b *testing.B) {
	r := New("run-1", StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09", "s10"}, "2026-10-13T22:00:03Z")
	for _, name := range r.Pipeline {
		out := `{"run":"bench-000001","step":"` + name + `","pad":"` + strings.Repeat("x", 156) + `"}`
		r.Step(name).Output = &Output{Inline: json.RawMessage(out), Digest: "SHA-256=Xq0e2pOQdUAzdKmZfK5Ht5jQdKPiwStPD6X3SkYDuZk=", Size: int64(len(out))}
	}
	enc, err := Encode(r)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		c := getCanonical()
		if !c.canonicalize(enc) {
			b.Fatal("gave up")
		}
		putCanonical(c)
	}
}

// FuzzDecodeRecord: where the fast decoder takes a document, it decodes it as encoding/json.
func FuzzDecodeRecord(f *testing.F) {
	r := New("run-1", StringParams(true, "warehouse", "ldh", "date", "2026-10-13"), []string{"a", "b"}, "2026-10-13T22:00:03Z")
	a := r.Step("a")
	a.Output = &Output{Inline: json.RawMessage(`{"z":[1,"\u00e9<",true,null,{}],"a":{"y":-12}}`), Digest: "SHA-256=x", Size: 30}
	a.SetLastError("owner \"x\" gone\n\t<now> é")
	a.Token, a.StartedAt, a.Effects = Ptr(uint64(7)), Ptr("t"), &Effects{Keys: 3, IntentsOpen: 1}
	a.Parked = []Parked{{Item: "i", Reason: "r"}}
	a.ParkedArtifact = &Output{Object: "o", Digest: "d", Size: 9}
	a.Versions = Versions{Code: Ptr("v"), Model: Ptr("m")}
	r.Lease = &Lease{Owner: "o", OwnerInbox: "i", Token: 123456789012345, Step: "a", WriteID: "w"}
	r.Approval = &Approval{Step: "b", PlanDigest: "p", By: Ptr("asha")}
	r.Undo = &Undo{RequestID: "u", Scope: json.RawMessage(`{"supplier":"SUP-07"}`), Total: 4, PreviousStatus: Running}
	r.Handover, r.SourceFingerprint = Ptr("h"), Ptr("sha256:1")
	r.Snapshot = &Output{Object: "s", Digest: "d", Size: 1}
	r.AddRequest("start-1")
	for _, rec := range []*Record{r, New("run-2", StringParams(false), nil, "")} {
		b, err := Encode(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"schema":1,"steps":{"a":null},"undo":{"scope":null},"pipeline":[],"requests":null,"sum":"x"}`))
	f.Add([]byte(`{"Schema":1,"sum":"x"}`))
	f.Add([]byte(`{"schema":"1","sum":"x"}`))
	f.Add([]byte(`{"params":null,"run_id":"a\\u0041\\n","sum":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := getCanonical()
		took := c.canonicalize(b)
		putCanonical(c)
		if !took {
			return
		}
		fast, ok := decodeRecord(b)
		if !ok {
			return
		}
		var want Record
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("the fast decoder took %q, encoding/json refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(fast, &want) {
			t.Fatalf("%q:\nfast %+v\njson %+v", b, fast, &want)
		}
	})
}

// TestDecodeRecordTakesRecords: the fast decoder takes every record this package writes.
func TestDecodeRecordTakesRecords(t *testing.T) {
	r := New("run-1", StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"a", "b"}, "2026-10-13T22:00:03Z")
	r.Step("a").Output = &Output{Inline: json.RawMessage(`{"z":[1,"\u00e9<"],"a":{"y":null}}`), Digest: "SHA-256=x", Size: 30}
	r.Step("a").SetLastError("owner \"x\" gone\n<now>")
	r.Lease = &Lease{Owner: "o", OwnerInbox: "i", Token: 123456789012345, Step: "a", WriteID: "w"}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := decodeRecord(b)
	if !ok {
		t.Fatalf("the fast decoder gave up on a record: %s", b)
	}
	var want Record
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("decoded %+v, want %+v", got, &want)
	}
}

// fuzzRecord fills every field of a record from the fuzzer's values.
func fuzzRecord(s1, s2, s3 string, n1, n2 int64, raw []byte) *Record {
	r := New(s1, StringParams(n1%2 == 0, "warehouse", s2, "date", s3), []string{"a", s2, "b"}, s3)
	r.Epoch, r.Status, r.NextAction, r.UpdatedAt = s3, Status(s1), s2+s3, s1+s2
	r.Restarts, r.Generation, r.Schema = int(n1), int(n2), int(n1^n2)
	r.SourceFingerprint, r.Handover = Ptr(s2), Ptr(s3)
	r.Snapshot = &Output{Object: s1, Digest: s2, Size: n2}
	r.Lease = &Lease{Owner: s1, OwnerInbox: s2, Token: uint64(n1), Step: s3, WriteID: s1}
	r.Requests = []string{s1, s2}
	r.Approval = &Approval{Step: s1, PlanDigest: s2, By: Ptr(s3)}
	r.Undo = &Undo{RequestID: s1, Scope: json.RawMessage(raw), Cursor: int(n1), Reversed: int(n2), Total: 3, PreviousStatus: Status(s2)}
	for i, name := range r.Pipeline {
		st := r.Steps[name]
		st.Attempts, st.ParkedCount = int(n1)+i, int(n2)
		st.StartedAt, st.FinishedAt, st.InputFingerprint, st.LastError = Ptr(s1), Ptr(s2), Ptr(s3), Ptr(s1+s2)
		st.Output = &Output{Inline: json.RawMessage(raw), Digest: s1, Size: n1}
		st.ParkedArtifact = &Output{Object: s2, Digest: s3, Size: n2}
		st.Versions = Versions{Code: Ptr(s1), Prompt: Ptr(s2), Model: Ptr(s3)}
		st.Token = Ptr(uint64(n2))
		st.Effects = &Effects{Keys: int(n1), IntentsOpen: int(n2)}
		st.Parked = []Parked{{Item: s2, Reason: s3}}
	}
	if n1%3 == 0 {
		r.Steps["a"] = nil
		r.Undo, r.Lease, r.Approval = nil, nil, nil
	}
	return r
}

// FuzzCanonicalRecord: the sum written straight from the struct is the sum of the record's
// encoding, as the general path computes it.
func FuzzCanonicalRecord(f *testing.F) {
	f.Add("run-1", "ldh", "2026-10-13", int64(1), int64(2), []byte(`{"a":[1,"é<"]}`))
	f.Add("a\"b\\c\n\x01\u2028<>&", "\xff\xfe", "é✓😀", int64(-1), int64(999999999999999), []byte(` [ {"b":1,"a":2} ] `))
	f.Add("", "", "", int64(3), int64(1234567890123456), []byte(`null`))
	f.Add("x", "y", "z", int64(4), int64(0), []byte(`1.5`))
	f.Add("x", "y", "z", int64(5), int64(0), []byte{})
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, n1, n2 int64, raw []byte) {
		r := fuzzRecord(s1, s2, s3, n1, n2, raw)
		r.Sum = ""
		b, err := json.Marshal(r)
		if err != nil {
			return
		}
		c := getCanonical()
		defer putCanonical(c)
		if !c.canonicalRecord(r) {
			return
		}
		fast := digest(c.out)
		slow, err := sumOfJCS(b)
		if err != nil {
			t.Fatalf("written straight, the general path refuses %s: %v", b, err)
		}
		if fast != slow {
			t.Fatalf("sum %s, general %s\nstraight  %s\nencoding %s", fast, slow, c.out, b)
		}
	})
}

// TestCanonicalRecordTakesRecords: records as the runner writes them are summed straight.
func TestCanonicalRecordTakesRecords(t *testing.T) {
	r := fuzzRecord("run-1", "ldh", "2026-10-13", 1, 2, []byte(`{"z":[1,"\u00e9<"],"a":{"y":null}}`))
	c := getCanonical()
	defer putCanonical(c)
	if !c.canonicalRecord(r) {
		t.Fatal("the straight writer gave up on a record")
	}
	r.Sum = ""
	b, _ := json.Marshal(r)
	if want, _ := sumOfJCS(b); digest(c.out) != want {
		t.Fatalf("sum %s, want %s", digest(c.out), want)
	}
}
