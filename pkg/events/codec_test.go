package events

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ, subject string
		data         any
	}{
		{TypeRunStart, RunStartSubject, StartCommand{RequestID: "r1", Params: nightInput()}},
		{TypeRunResume, RunSubject(testRun, VerbResume), Command{AfterFix: true}},
		{TypeRunApprove, RunSubject(testRun, VerbApprove), Command{By: "asha"}},
		{TypeRunReject, RunSubject(testRun, VerbReject), Command{}},
		{TypeRunCancel, RunSubject(testRun, VerbCancel), Command{}},
		{TypeRunRerun, RunSubject(testRun, VerbRerun), Command{From: "match"}},
		{TypeRunUndo, RunSubject(testRun, VerbUndo), Command{Scope: &UndoScope{Where: map[string]string{"supplier": "SUP-7"}}}},
		{TypeStepReady, StepSubject("fetch", testRun), StepReady{RunID: testRun, Step: "fetch", Generation: 1}},
		{TypeAudit, AuditSubject(testRun), Audit{RunID: testRun, Step: "extract", Event: "extractor.called", Token: 7, Attrs: map[string]string{"model": "rules-1"}}},
		{TypeOutbox, OutboxSubject(testRun, "debit"), map[string]string{"key": testRun + ":debit:SUP-7"}},
		{TypeRejected, RejectedSubject, Rejected{Subject: "cairn.runs.start", Reason: "bad", Data: "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			t.Parallel()
			e := mustEvent(t, testRun+":"+tc.typ, tc.typ, testRun, tc.data)
			e.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			m, err := Encode(tc.subject, e)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if m.Subject != tc.subject {
				t.Fatalf("subject = %q, want %q", m.Subject, tc.subject)
			}
			want := map[string]string{
				"ce-specversion":     "1.0",
				"ce-id":              e.ID,
				"ce-type":            tc.typ,
				"ce-source":          "/cairn/test",
				"ce-subject":         testRun,
				"ce-time":            "2026-10-13T22:00:03.123456789Z",
				"ce-datacontenttype": "application/json",
				"ce-traceparent":     e.TraceParent,
				"Nats-Msg-Id":        e.ID,
			}
			checkHeaders(t, m.Header, want)
			wantBody, _ := json.Marshal(tc.data)
			if string(m.Data) != string(wantBody) {
				t.Fatalf("body = %s, want %s", m.Data, wantBody)
			}
			got, err := Decode(m)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			sameEvent(t, got, e)
		})
	}
}

func TestEncodeWithoutTraceParent(t *testing.T) {
	t.Parallel()
	e := mustEvent(t, "id-1", TypeStepReady, testRun, StepReady{RunID: testRun, Step: "fetch"})
	m, err := Encode(StepSubject("fetch", testRun), e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if _, ok := m.Header["ce-traceparent"]; ok {
		t.Fatalf("ce-traceparent present without a trace: %v", m.Header)
	}
	if len(m.Header) != 8 {
		t.Fatalf("headers = %v, want the 8 of an untraced event", slices.Sorted(maps.Keys(m.Header)))
	}
}

func checkHeaders(t *testing.T, got nats.Header, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("headers %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for k, v := range want {
		if vs := got[k]; len(vs) != 1 || vs[0] != v {
			t.Errorf("header %s = %q, want [%q]", k, vs, v)
		}
	}
}

func TestNewData(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		data any
		want string
	}{
		{"struct", StepReady{RunID: "r", Step: "s"}, `{"run_id":"r","step":"s","generation":0}`},
		{"raw message", json.RawMessage(`{"a":1}`), `{"a":1}`},
		{"bytes", []byte(`[1,2]`), `[1,2]`},
		{"empty raw", json.RawMessage(nil), `{}`},
		{"nil", nil, `null`},
	}
	for _, tc := range cases {
		e, err := New("id", TypeAudit, "/cairn/test", testRun, when, tc.data)
		if err != nil {
			t.Fatalf("%s: New: %v", tc.name, err)
		}
		if string(e.Data) != tc.want {
			t.Errorf("%s: data = %s, want %s", tc.name, e.Data, tc.want)
		}
	}
	if _, err := New("id", TypeAudit, "/cairn/test", testRun, when, []byte("{")); !errors.Is(err, ErrInvalid) {
		t.Errorf("New with bad raw JSON: err = %v, want ErrInvalid", err)
	}
	if _, err := New("id", TypeAudit, "/cairn/test", testRun, when, func() {}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New with a func: err = %v, want ErrInvalid", err)
	}
}

// binaryMsg is a well-formed binary-mode message to break one way per case.
func binaryMsg() *nats.Msg {
	return &nats.Msg{
		Subject: StepSubject("fetch", testRun),
		Header: nats.Header{
			"ce-specversion":     {"1.0"},
			"ce-id":              {"id-1"},
			"ce-type":            {TypeStepReady},
			"ce-source":          {"/cairn/test"},
			"ce-subject":         {testRun},
			"ce-time":            {"2026-10-13T22:00:03Z"},
			"ce-datacontenttype": {"application/json"},
		},
		Data: []byte(`{"run_id":"run-2026-10-13-ldh","step":"fetch","generation":0}`),
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(m *nats.Msg)
		want   string
	}{
		{"missing type", func(m *nats.Msg) { delete(m.Header, "ce-type") }, "missing ce-type"},
		{"missing id", func(m *nats.Msg) { delete(m.Header, "ce-id") }, "missing ce-id"},
		{"missing source", func(m *nats.Msg) { delete(m.Header, "ce-source") }, "missing ce-source"},
		{"missing subject", func(m *nats.Msg) { delete(m.Header, "ce-subject") }, "missing ce-subject"},
		{"unknown type", func(m *nats.Msg) { m.Header.Set("ce-type", "x") }, `unknown type "x"`},
		{"old specversion", func(m *nats.Msg) { m.Header.Set("ce-specversion", "0.3") }, `specversion "0.3"`},
		{"unknown specversion", func(m *nats.Msg) { m.Header.Set("ce-specversion", "2.0") }, "reading ce-* headers"},
		{"bad time", func(m *nats.Msg) { m.Header.Set("ce-time", "yesterday") }, "reading ce-* headers"},
		{"not JSON", func(m *nats.Msg) { m.Data = []byte("{oops") }, "data is not JSON: "},
		{"not JSON content type", func(m *nats.Msg) { m.Header.Set("ce-datacontenttype", "text/plain") }, `datacontenttype "text/plain"`},
		{"dot in run id", func(m *nats.Msg) { m.Header.Set("ce-subject", "run.1") }, `ce-subject "run.1"`},
		{"star in run id", func(m *nats.Msg) { m.Header.Set("ce-subject", "run*") }, `ce-subject "run*"`},
		{"space in id", func(m *nats.Msg) { m.Header.Set("ce-id", "a b") }, `ce-id "a b"`},
		{"too large", func(m *nats.Msg) { m.Data = []byte(`"` + strings.Repeat("x", MaxSize) + `"`) }, "more than 65536"},
		{"structured not JSON", func(m *nats.Msg) { m.Header = nil }, "reading structured event"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := binaryMsg()
			tc.change(m)
			_, err := Decode(m)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestDecodeEmptyBodyIsEmptyObject(t *testing.T) {
	t.Parallel()
	m := binaryMsg()
	m.Data = nil
	e, err := Decode(m)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if string(e.Data) != "{}" {
		t.Fatalf("data = %q, want {}", e.Data)
	}
}

func TestDecodeStructured(t *testing.T) {
	t.Parallel()
	m := &nats.Msg{Subject: AuditSubject(testRun), Data: []byte(`{
		"specversion": "1.0", "id": "a-1", "type": "io.cairn.audit.recorded.v1",
		"source": "/cairn/test", "subject": "run-2026-10-13-ldh",
		"time": "2026-10-13T22:00:03.123456789+05:30", "traceparent": "00-abc-def-01",
		"datacontenttype": "application/json", "data": {"run_id":"run-2026-10-13-ldh","event":"fenced"}}`)}
	got, err := Decode(m)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := Event{
		ID: "a-1", Type: TypeAudit, Source: "/cairn/test", Subject: testRun,
		Time:        when.Add(-5*time.Hour - 30*time.Minute),
		TraceParent: "00-abc-def-01",
		Data:        json.RawMessage(`{"run_id":"run-2026-10-13-ldh","event":"fenced"}`),
	}
	sameEvent(t, got, want)
	var a Audit
	if err := got.Unmarshal(&a); err != nil || a.Event != "fenced" {
		t.Fatalf("Unmarshal = %+v, %v", a, err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	t.Parallel()
	good := mustEvent(t, "id-1", TypeStepReady, testRun, StepReady{})
	cases := []struct {
		name   string
		change func(e *Event)
		want   string
	}{
		{"unknown type", func(e *Event) { e.Type = "io.cairn.nope.v1" }, "unknown type"},
		{"no id", func(e *Event) { e.ID = "" }, "missing ce-id"},
		{"newline in id", func(e *Event) { e.ID = "a\nb" }, "control character"},
		{"no run id", func(e *Event) { e.Subject = "" }, "missing ce-subject"},
		{"bad run id", func(e *Event) { e.Subject = "a:b" }, `ce-subject "a:b"`},
		{"bad data", func(e *Event) { e.Data = json.RawMessage("nope") }, "data is not JSON"},
		{"source not a URI reference", func(e *Event) { e.Source = "%zz" }, "source"},
		{"year 10000", func(e *Event) { e.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "outside years"},
	}
	for _, tc := range cases {
		e := good
		tc.change(&e)
		_, err := Encode("cairn.x", e)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	start := mustEvent(t, "r-1", TypeRunStart, "", StartCommand{Params: nightInput()})
	if _, err := Encode(RunStartSubject, start); err != nil {
		t.Errorf("start without run id: %v", err)
	}
}

func TestUnmarshalRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	e := mustEvent(t, "id", TypeRunApprove, testRun, json.RawMessage(`{"by":"asha","byy":"x"}`))
	var c Command
	err := e.Unmarshal(&c)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"byy"`) {
		t.Fatalf("err = %v, want ErrInvalid naming byy", err)
	}
}
