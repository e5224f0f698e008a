package kvcheckpoint_test

import (
	"slices"
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// fanned is fetch → {profile, geo, risk} → validate → upload: three steps side by side
// after fetch, and validate after all three.
func fanned() *kc.Record {
	r := kc.New("run-fan", kc.StringParams(false, "source", "records.jsonl"), []string{"fetch", "profile", "geo", "risk", "validate", "upload"}, "2026-11-01T22:00:00Z")
	r.After = kc.Graph{"fetch": {}, "profile": {"fetch"}, "geo": {"fetch"}, "risk": {"fetch"}, "validate": {"profile", "geo", "risk"}, "upload": {"validate"}}
	return r
}

func verify(r *kc.Record, steps ...string) {
	for _, s := range steps {
		r.Step(s).Status = kc.Verified
	}
}

// The graph decides which steps may run: the three after fetch at once, validate only when
// the last of them is verified, and the one whose verification completes the set is the one
// that unblocks it.
func TestGraphReadyAndUnblocked(t *testing.T) {
	r := fanned()
	if got := r.Ready(); !slices.Equal(got, []string{"fetch"}) {
		t.Fatalf("ready at the start = %v, want [fetch]", got)
	}
	verify(r, "fetch")
	if got := r.Unblocked("fetch"); !slices.Equal(got, []string{"profile", "geo", "risk"}) {
		t.Fatalf("fetch unblocks %v, want [profile geo risk]", got)
	}
	verify(r, "geo")
	if got := r.Unblocked("geo"); len(got) != 0 {
		t.Fatalf("geo alone unblocks %v, want nothing", got)
	}
	if r.EarlierVerified("validate") {
		t.Fatal("validate may run with profile and risk pending")
	}
	if got := r.Ready(); !slices.Equal(got, []string{"profile", "risk"}) {
		t.Fatalf("ready = %v, want [profile risk]", got)
	}
	if got, want := r.Next("risk"), "profile"; got != want {
		t.Fatalf("after risk the run waits on %q, want %q", got, want)
	}
	verify(r, "profile", "risk")
	if got := r.Unblocked("risk"); !slices.Equal(got, []string{"validate"}) {
		t.Fatalf("risk, the last of the three, unblocks %v, want [validate]", got)
	}
	if got := r.Dependents("fetch"); !slices.Equal(got, []string{"profile", "geo", "risk"}) {
		t.Fatalf("dependents of fetch = %v", got)
	}
	verify(r, "validate", "upload")
	if r.Next("upload") != "" || !r.AllVerified() {
		t.Fatal("the last step verified leaves something to wait on")
	}
}

// A record with no graph runs its steps one after another, as every record before schema 5.
func TestLinearRecordHasNoGraph(t *testing.T) {
	r := newRecord("run-linear")
	if r.After != nil {
		t.Fatalf("after = %v, want null", r.After)
	}
	verify(r, r.Pipeline[0])
	if got := r.Unblocked(r.Pipeline[0]); !slices.Equal(got, r.Pipeline[1:2]) {
		t.Fatalf("unblocked = %v, want %v", got, r.Pipeline[1:2])
	}
	if r.EarlierVerified(r.Pipeline[2]) {
		t.Fatal("the third step may run with the second pending")
	}
}

// The graph survives the store: written, read back, summed and checked.
func TestGraphRoundTrips(t *testing.T) {
	r := fanned()
	b, err := kc.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kc.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Check("run-fan", nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.After["validate"], []string{"profile", "geo", "risk"}) || got.After["fetch"] == nil {
		t.Fatalf("after read back = %v", got.After)
	}
}
