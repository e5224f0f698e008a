package saga_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/saga"
)

// A record written before Attrs carried its attribute as "<name>_id": it is read as that
// attribute, and an undo scoped by it selects the record; any other unknown member is
// refused, naming it.
func TestLegacyAttributeMember(t *testing.T) {
	old := `{"key":"k1","run_id":"r","step":"one","generation":0,"token":3,"phase":"intent","supplier_id":"SUP-07","payload":{},"reverse":{"system":"rows","key":"k1:rev","payload":{}}}`
	var r saga.Record
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	if r.Attrs["supplier"] != "SUP-07" || r.Key != "k1" || r.Token != 3 || r.Reverse == nil {
		t.Fatalf("decoded %+v", r)
	}
	scope := saga.Scope{Where: map[string]string{"supplier": "SUP-07"}}
	if !scope.Selects(r) {
		t.Error("a scope by the legacy attribute does not select its record")
	}
	if (saga.Scope{Where: map[string]string{"supplier": "SUP-08"}}).Selects(r) || (saga.Scope{Step: "two"}).Selects(r) {
		t.Error("a scope of another supplier or step selects the record")
	}
	// attrs, when present, wins over the legacy member.
	both := strings.Replace(old, `"payload":{}`, `"attrs":{"supplier":"SUP-09"},"payload":{}`, 1)
	if err := json.Unmarshal([]byte(both), &r); err != nil || r.Attrs["supplier"] != "SUP-09" {
		t.Fatalf("attrs and a legacy member: %+v, %v", r.Attrs, err)
	}
	for _, bad := range []string{
		strings.Replace(old, `"supplier_id":"SUP-07"`, `"supplier":"SUP-07"`, 1),
		strings.Replace(old, `"supplier_id":"SUP-07"`, `"supplier_id":7`, 1),
		strings.Replace(old, `"supplier_id":"SUP-07"`, `"_id":"x"`, 1),
	} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: %v, want an unknown field refused", bad, err)
		}
	}
	// The new layout round-trips.
	r = saga.Record{Key: "k2", Phase: saga.Intent, Attrs: map[string]string{"supplier": "SUP-07"}, Payload: json.RawMessage(`{}`)}
	b, _ := json.Marshal(r)
	var again saga.Record
	if err := json.Unmarshal(b, &again); err != nil || again.Attrs["supplier"] != "SUP-07" {
		t.Fatalf("%s: %+v, %v", b, again, err)
	}
}
