package runner

import (
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The evidence before a step that cannot be undone is unclear for each reason the record
// keeps (items parked by an earlier verified step, a step restarted under other versions, a
// source change a person accepted), named in the pipeline's order; a clean run's is clear,
// and a step not yet verified does not count.
func TestUnclearEvidence(t *testing.T) {
	rec := func(change func(r *kc.Record)) *kc.Record {
		r := kc.New("r1", kc.StringParams(false, "warehouse", "ldh", "date", "2026-10-13"), []string{"fetch", "extract", "post", "mail"}, "2026-10-13T22:00:00Z")
		for _, s := range []string{"fetch", "extract", "post"} {
			r.Step(s).Status = kc.Verified
		}
		change(r)
		return r
	}
	for _, tc := range []struct {
		name string
		rec  *kc.Record
		want string
	}{
		{"clean", rec(func(*kc.Record) {}), ""},
		{"parked", rec(func(r *kc.Record) { r.Step("extract").ParkedCount = 2 }), "2 items parked at extract"},
		{"one parked", rec(func(r *kc.Record) { r.Step("extract").ParkedCount = 1 }), "1 item parked at extract"},
		{"parked by a step not verified", rec(func(r *kc.Record) {
			r.Step("post").Status, r.Step("post").ParkedCount = kc.InProgress, 3
		}), ""},
		{"versions", rec(func(r *kc.Record) {
			r.Step("post").SetLastError("the previous attempt's owner died or was taken over; " + versionChangeNote + "code a → b")
		}), "post was restarted under other versions"},
		{"an anomaly", rec(func(r *kc.Record) { r.Step("extract").SetLastError(anomalyNote + "total ties out within 3 paise") }),
			"extract its verification found an anomaly: total ties out within 3 paise"},
		{"drift accepted", rec(func(r *kc.Record) { r.Step("fetch").SetLastError(DriftAccepted + " (after a fix): source changed") }),
			"the source changed during the run and fetch read it again after a fix"},
		{"the step's own restart", rec(func(r *kc.Record) {
			r.Step("mail").Status = kc.InProgress
			r.Step("mail").SetLastError(versionChangeNote + "model x → y")
		}), "mail was restarted under other versions"},
		{"all, in order", rec(func(r *kc.Record) {
			r.Step("fetch").SetLastError(DriftAccepted)
			r.Step("extract").ParkedCount = 4
		}), "the source changed during the run and fetch read it again after a fix; 4 items parked at extract"},
	} {
		if got := unclearEvidence(tc.rec, "mail"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
