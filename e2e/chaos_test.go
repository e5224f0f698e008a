package e2e

import (
	"encoding/json"
	"testing"

	"github.com/cairnhq/cairn/internal/chaos"
)

// cairn chaos, at a crash point in a step, at a step boundary, in the supervisor and in the
// compensator (an undo of the whole night, against the night undone uninterrupted): it runs
// the references, crashes and restarts the others, and reports zero differences (the whole sampled set runs in TestCrashMatrix and
// by hand with `cairn chaos`).
func TestChaosCommand(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	n := newNight(t, 0)
	out, code := n.cli("chaos", "--dir", n.dir+"/chaos", "--json", "--points",
		"post-ledger.before-write.24=exit@once,update-stock.after-commit=exit@once,supervisor.after-record=exit@once,undo.after-write.51=exit@once")
	var results []chaos.Result
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("cairn chaos --json (exit %d): %v\n%s", code, err, out)
	}
	if code != 0 || len(results) != 4 {
		t.Fatalf("cairn chaos: exit %d, %+v", code, results)
	}
	for _, r := range results {
		if !r.Fired || len(r.Differences) != 0 || r.Duplicates != 0 || r.ExtraCalls != 0 {
			t.Errorf("%s: %+v", r.Fault, r)
		}
	}
	if r := results[0]; len(r.Resumed) == 0 || r.Resumed[0] != "post-ledger" {
		t.Errorf("the crash at ledger entry 24 resumed %v, want from post-ledger", r.Resumed)
	}
}
