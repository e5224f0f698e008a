package events

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// directEvents are events of every kind the framework writes, and some it never would: odd
// sources, zones, zero and far times, no subject, no trace, empty data.
func directEvents(t *testing.T) []Event {
	var out []Event
	sources := []string{"/cairn/test", "/cairn/bench-s01", "http://host:8080/a?b=c", "/a b", "/x%zz", "urn:cairn:x", "/ä", "//h/p#f"}
	times := []time.Time{{}, when, when.In(time.FixedZone("IST", 5*3600+1800)), time.Date(2026, 12, 4, 20, 40, 6, 346_452_990, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i, typ := range []string{TypeStepReady, TypeAudit, TypeOutbox, TypeSaga, TypeRunCancel, TypeRunStart} {
		for j, src := range sources {
			for k, at := range times {
				e := Event{ID: StepReadyID(testRun, "s01", uint64(100*i+10*j+k)), Type: typ, Source: src, Subject: testRun, Time: at, Data: []byte(`{"run_id":"` + testRun + `","step":"s01"}`)}
				switch (i + j + k) % 4 {
				case 1:
					e.TraceParent = "00-dc6b2a17278d166ca2def1d77b95621c-fe91f542a766aa8c-01"
				case 2:
					e.Data = nil
				case 3:
					if typ == TypeRunStart {
						e.Subject = ""
					}
				}
				out = append(out, e)
			}
		}
	}
	return out
}

// The direct codec is the sdk's: for every event, the message encodeDirect writes (when it
// takes the event) is the one the sdk writes, and the event decodeDirect reads from the sdk's
// message and from variants of it (when it takes them) is the one the sdk reads. What it
// declines goes to the sdk, so the codec's behaviour is the sdk's throughout.
func TestDirectCodecIsTheSDKs(t *testing.T) {
	direct, declined, read := 0, 0, 0
	for _, e := range directEvents(t) {
		subject := StepSubject("s01", testRun)
		e.Data = normData(e.Data)
		if e.check(e.Type == TypeRunStart) != nil {
			continue
		}
		want, err := encodeSDK(subject, e)
		if err != nil {
			declined++
			if _, ok := encodeDirect(subject, e); ok {
				t.Errorf("encodeDirect took %+v, which the sdk refuses: %v", e, err)
			}
			continue
		}
		if got, ok := encodeDirect(subject, e); ok {
			direct++
			if !reflect.DeepEqual(got.Header, want.Header) || string(got.Data) != string(want.Data) || got.Subject != want.Subject {
				t.Errorf("for %+v\ndirect %q\nsdk    %q", e, wire(got), wire(want))
			}
		} else {
			declined++
		}
		for _, m := range variants(want) {
			got, ok := decodeDirect(m, e.Type == TypeRunStart)
			if !ok {
				continue
			}
			read++
			sdk, err := decodeSDK(m, e.Type == TypeRunStart)
			if err != nil {
				t.Errorf("decodeDirect read %q, which the sdk refuses: %v", wire(m), err)
				continue
			}
			if !reflect.DeepEqual(got, sdk) {
				t.Errorf("from %q\ndirect %+v\nsdk    %+v", wire(m), got, sdk)
			}
		}
	}
	if direct == 0 || declined == 0 || read == 0 {
		t.Fatalf("encoded %d directly, declined %d, read %d directly: the test covers too little", direct, declined, read)
	}
	t.Logf("encoded %d directly, %d by the sdk; read %d directly", direct, declined, read)
}

// variants are m and messages near it: a header dropped, changed, doubled, emptied, added.
func variants(m *nats.Msg) []*nats.Msg {
	out := []*nats.Msg{m}
	with := func(change func(h nats.Header)) {
		h := nats.Header{}
		for k, v := range m.Header {
			h[k] = slices.Clone(v)
		}
		change(h)
		out = append(out, &nats.Msg{Subject: m.Subject, Header: h, Data: m.Data})
	}
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		with(func(h nats.Header) { delete(h, k) })
		with(func(h nats.Header) { h[k] = []string{""} })
		with(func(h nats.Header) { h[k] = append(h[k], "again") })
		with(func(h nats.Header) { h[k] = []string{strings.ToUpper(h[k][0])} })
	}
	with(func(h nats.Header) { h["ce-other"] = []string{"x"} })
	with(func(h nats.Header) { h["Ce-Id"] = []string{"x"} })
	with(func(h nats.Header) { h[hdrTime] = []string{"2026-12-04T20:40:06.100Z"} })
	with(func(h nats.Header) { h[hdrTime] = []string{"2026-12-04T20:40:06+05:30"} })
	with(func(h nats.Header) { h[hdrTime] = []string{"2026-12-04 20:40:06Z"} })
	with(func(h nats.Header) { h[hdrContentType] = []string{"application/json; charset=utf-8"} })
	with(func(h nats.Header) { h[hdrSpecVersion] = []string{"0.3"} })
	out = append(out, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: []byte("{oops")})
	out = append(out, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: nil})
	return out
}
