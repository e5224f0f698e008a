package events

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/cairnhq/cairn/pkg/assets"
)

func TestDecodeCommandPlainStart(t *testing.T) {
	t.Parallel()
	m := &nats.Msg{Subject: RunStartSubject, Data: []byte(`{"run_id":"run-2026-10-13-ldh","warehouse":"ldh","date":"2026-10-13"}`)}
	e, err := DecodeCommand(assets.Default, m, "seq-7")
	if err != nil {
		t.Fatalf("DecodeCommand: %v", err)
	}
	sameEvent(t, e, Event{ID: "seq-7", Type: TypeRunStart, Source: SourceNATSCLI, Subject: testRun, Data: m.Data})
	var c StartCommand
	if err := e.Unmarshal(&c); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if want := (StartCommand{RunID: testRun, Params: nightInput()}); !reflect.DeepEqual(c, want) {
		t.Fatalf("command = %+v, want %+v", c, want)
	}
}

func TestDecodeCommandStartWithoutRunID(t *testing.T) {
	t.Parallel()
	m := &nats.Msg{Subject: RunStartSubject, Data: []byte(`{"request_id":"req-1","warehouse":"ldh","date":"2026-10-13","shadow":true}`)}
	m.Header = nats.Header{"traceparent": {"00-abc-def-01"}}
	e, err := DecodeCommand(assets.Default, m, "seq-1")
	if err != nil {
		t.Fatalf("DecodeCommand: %v", err)
	}
	if e.ID != "req-1" || e.Subject != "" || e.TraceParent != "00-abc-def-01" {
		t.Fatalf("event = %s, want id req-1, no subject, the traceparent", show(e))
	}
	var c StartCommand
	if err := e.Unmarshal(&c); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if want := (StartCommand{RequestID: "req-1", Shadow: true, Params: nightInput()}); !reflect.DeepEqual(c, want) {
		t.Fatalf("command = %+v, want %+v", c, want)
	}
}

func TestDecodeCommandEmptyApprove(t *testing.T) {
	t.Parallel()
	m := &nats.Msg{Subject: RunSubject(testRun, VerbApprove)}
	e, err := DecodeCommand(assets.Default, m, "seq-42")
	if err != nil {
		t.Fatalf("DecodeCommand: %v", err)
	}
	sameEvent(t, e, Event{ID: "seq-42", Type: TypeRunApprove, Source: SourceNATSCLI, Subject: testRun, Data: []byte("{}")})
	var c Command
	if err := e.Unmarshal(&c); err != nil || c != (Command{}) {
		t.Fatalf("Unmarshal = %+v, %v; want an empty command", c, err)
	}
}

func TestDecodeCommandCloudEvent(t *testing.T) {
	t.Parallel()
	e := mustEvent(t, "req-9", TypeRunUndo, testRun, Command{RequestID: "req-9", Scope: &UndoScope{Step: "post-ledger"}})
	m, err := Encode(RunSubject(testRun, VerbUndo), e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	got, err := DecodeCommand(assets.Default, m, "seq-1")
	if err != nil {
		t.Fatalf("DecodeCommand: %v", err)
	}
	sameEvent(t, got, e)

	start := mustEvent(t, "req-1", TypeRunStart, "", StartCommand{Params: nightInput()})
	if m, err = Encode(RunStartSubject, start); err != nil {
		t.Fatalf("Encode start: %v", err)
	}
	if got, err = DecodeCommand(assets.Default, m, "seq-2"); err != nil {
		t.Fatalf("DecodeCommand start without subject: %v", err)
	}
	sameEvent(t, got, start)
	if _, err := Decode(m); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode of a start without subject: err = %v, want ErrInvalid", err)
	}
}

func TestDecodeCommandRefuses(t *testing.T) {
	t.Parallel()
	approve := mustEvent(t, "req-1", TypeRunApprove, testRun, Command{})
	wrongType, _ := Encode(RunSubject(testRun, VerbCancel), approve)
	wrongRun, _ := Encode(RunSubject("run-other", VerbApprove), approve)
	cases := []struct {
		name string
		m    *nats.Msg
		want string
	}{
		{"bad JSON", &nats.Msg{Subject: RunStartSubject, Data: []byte(`{"warehouse":`)}, "data is not JSON: unexpected end of JSON input"},
		{"not an object", &nats.Msg{Subject: RunSubject(testRun, VerbResume), Data: []byte(`[1]`)}, "not a JSON object"},
		{"dot in run_id", &nats.Msg{Subject: RunStartSubject, Data: []byte(`{"run_id":"run.1","warehouse":"ldh","date":"2026-10-13"}`)}, `run_id "run.1"`},
		{"star in run_id", &nats.Msg{Subject: RunStartSubject, Data: []byte(`{"run_id":"run*","warehouse":"ldh","date":"2026-10-13"}`)}, `run_id "run*"`},
		{"run_id not a string", &nats.Msg{Subject: RunStartSubject, Data: []byte(`{"run_id":7}`)}, "run_id is not a string"},
		{"request_id with a space", &nats.Msg{Subject: RunSubject(testRun, VerbCancel), Data: []byte(`{"request_id":"a b"}`)}, `request_id "a b"`},
		{"unknown verb", &nats.Msg{Subject: RunSubject(testRun, "explode")}, `unknown verb "explode"`},
		{"dotted run in subject", &nats.Msg{Subject: "cairn.runs.run.1.approve"}, `subject "cairn.runs.run.1.approve"`},
		{"star run in subject", &nats.Msg{Subject: "cairn.runs.*.approve"}, `"*"`},
		{"type does not match subject", wrongType, "does not match the subject's"},
		{"run does not match subject", wrongRun, `ce-subject "run-2026-10-13-ldh" does not match`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeCommand(assets.Default, tc.m, "seq-1")
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestDecodeCommandNeedsAnID(t *testing.T) {
	t.Parallel()
	_, err := DecodeCommand(assets.Default, &nats.Msg{Subject: RunSubject(testRun, VerbCancel)}, "")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no request_id") {
		t.Fatalf("err = %v, want ErrInvalid saying no request_id", err)
	}
}

// nightInput is the reference night's members of a start.
func nightInput() map[string]json.RawMessage {
	return map[string]json.RawMessage{"warehouse": json.RawMessage(`"ldh"`), "date": json.RawMessage(`"2026-10-13"`)}
}

// A start's framework members are checked here; its input is the pipeline's to check.
func TestStartCommandValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		c     StartCommand
		field string // "" when valid
	}{
		{"valid", StartCommand{Params: nightInput()}, ""},
		{"valid with everything", StartCommand{RequestID: "r:1", RunID: "run-x", Shadow: true, Params: nightInput()}, ""},
		{"any input", StartCommand{Params: map[string]json.RawMessage{"source": json.RawMessage(`{"mailbox":"ap"}`)}}, ""},
		{"starred run id", StartCommand{RunID: "run*", Params: nightInput()}, `run_id "run*"`},
		{"long run id", StartCommand{RunID: strings.Repeat("r", 65), Params: nightInput()}, "run_id"},
		{"request id with newline", StartCommand{RequestID: "a\nb", Params: nightInput()}, "request_id"},
	}
	for _, tc := range cases {
		err := tc.c.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: Validate = %v, want nil", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want ErrInvalid naming %s", tc.name, err, tc.field)
		}
	}
}

// A start is one flat object: the framework's members and the pipeline's side by side.
func TestStartCommandJSON(t *testing.T) {
	t.Parallel()
	c := StartCommand{RequestID: "r1", RunID: "run-1", Shadow: true, Params: map[string]json.RawMessage{"date": json.RawMessage(`"2026-10-13"`), "limit": json.RawMessage(`5`)}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"date":"2026-10-13","limit":5,"request_id":"r1","run_id":"run-1","shadow":true}`; string(b) != want {
		t.Fatalf("%s, want %s", b, want)
	}
	var back StartCommand
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip %+v, %v", back, err)
	}
	for _, bad := range []string{`{"shadow":"yes"}`, `{"run_id":7}`, `[]`, `null`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s taken", bad)
		}
	}
	if _, err := json.Marshal(StartCommand{Params: map[string]json.RawMessage{"run_id": json.RawMessage(`"x"`)}}); err == nil {
		t.Error("an input naming run_id was encoded")
	}
}

func TestCommandValidate(t *testing.T) {
	t.Parallel()
	good := []Command{{}, {From: "match"}, {Scope: &UndoScope{Where: map[string]string{"supplier": "SUP-7"}, Step: "post-ledger"}}, {Scope: &UndoScope{}}}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", c, err)
		}
	}
	bad := []struct {
		c     Command
		field string
	}{
		{Command{From: "a.b"}, "from"},
		{Command{Scope: &UndoScope{Where: map[string]string{"supplier": "s*"}}}, "scope.where.supplier"},
		{Command{Scope: &UndoScope{Where: map[string]string{"supplier": ""}}}, "scope.where.supplier"},
		{Command{Scope: &UndoScope{Where: map[string]string{"a.b": "x"}}}, "scope.where attribute"},
		{Command{Scope: &UndoScope{Step: "x y"}}, "scope.step"},
		{Command{RequestID: "a b"}, "request_id"},
	}
	for _, tc := range bad {
		if err := tc.c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid naming %s", tc.c, err, tc.field)
		}
	}
}

// An undo's scope selects by attributes: {"where": {...}}, or the shorthand of one
// attribute per member ({"supplier": "SUP-07"}, as DESIGN.md's undo command has it); any
// other member is refused naming it.
func TestUndoScopeJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want UndoScope
	}{
		{`{"supplier":"SUP-07"}`, UndoScope{Where: map[string]string{"supplier": "SUP-07"}}},
		{`{"supplier":"SUP-07","step":"post-ledger"}`, UndoScope{Where: map[string]string{"supplier": "SUP-07"}, Step: "post-ledger"}},
		{`{"where":{"supplier":"SUP-07","region":"north"}}`, UndoScope{Where: map[string]string{"supplier": "SUP-07", "region": "north"}}},
		{`{"where":{"a":"1"},"b":"2"}`, UndoScope{Where: map[string]string{"a": "1", "b": "2"}}},
		{`{}`, UndoScope{}},
	} {
		var got UndoScope
		if err := json.Unmarshal([]byte(tc.in), &got); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var again UndoScope
		if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%s round trip %s: %+v, %v", tc.in, b, again, err)
		}
	}
	for _, in := range []string{`{"supplier":7}`, `{"where":["a"]}`, `{"step":1}`, `[]`} {
		var got UndoScope
		if err := json.Unmarshal([]byte(in), &got); err == nil {
			t.Errorf("%s taken as %+v", in, got)
		}
	}
}
