package night

import (
	"encoding/json"
	"strings"
	"testing"
)

// The night's input: warehouse and date, checked as the start always checked them, and
// nothing else (another pipeline's input is refused naming its member).
func TestCheckInput(t *testing.T) {
	in := func(members string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(members), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if err := CheckInput(in(`{"warehouse":"LDH_2","date":"2026-02-28"}`)); err != nil {
		t.Fatalf("a good input: %v", err)
	}
	for _, tc := range []struct{ members, want string }{
		{`{"date":"2026-10-13"}`, "warehouse is required"},
		{`{"warehouse":"l.dh","date":"2026-10-13"}`, `warehouse "l.dh"`},
		{`{"warehouse":"ldh"}`, "date is required"},
		{`{"warehouse":"ldh","date":"13/10/2026"}`, `date "13/10/2026"`},
		{`{"warehouse":"ldh","date":"2026-02-30"}`, `date "2026-02-30"`},
		{`{"warehouse":"ldh","date":"2026-1-3"}`, `date "2026-1-3"`},
		{`{"warehouse":"ldh","date":"2026-10-13","source":"mailbox"}`, `unknown field "source"`},
		{`{"warehouse":7,"date":"2026-10-13"}`, "warehouse"},
	} {
		if err := CheckInput(in(tc.members)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.members, err, tc.want)
		}
	}
	if got := Pipeline.DefaultRunID(in(`{"warehouse":"ldh","date":"2026-10-13"}`)); got != "run-2026-10-13-ldh" {
		t.Errorf("default run id %q, want run-2026-10-13-ldh", got)
	}
}
