package assets_test

import (
	"strings"
	"testing"

	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/pkg/assets"
)

// The refusals and the audit timeline are bounded by age, bytes and messages; Ensure (cairn
// init) sets those limits on streams an earlier release made without them, and Check (a
// service's start) does not refuse such a stream.
func TestRecordingStreamsHaveRetentionLimits(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t)
	ensure(t, js, config())
	want := map[string][3]int64{
		assets.StreamAudit:    {int64(assets.AuditMaxAge), assets.AuditMaxBytes, assets.AuditMaxMsgs},
		assets.StreamRejected: {int64(assets.RejectedMaxAge), assets.RejectedMaxBytes, assets.RejectedMaxMsgs},
	}
	for name, w := range want {
		got := streamConfig(t, js, name)
		if g := [3]int64{int64(got.MaxAge), got.MaxBytes, got.MaxMsgs}; g != w {
			t.Errorf("stream %s: max age, bytes, messages %v, want %v", name, g, w)
		}
		// As an earlier release made it: no limits.
		got.MaxAge, got.MaxBytes, got.MaxMsgs = 0, -1, -1
		if _, err := js.UpdateStream(t.Context(), got); err != nil {
			t.Fatalf("lifting the limits of %s: %v", name, err)
		}
	}
	if err := assets.Check(t.Context(), js, config()); err != nil {
		t.Fatalf("Check of streams without retention limits: %v", err)
	}
	changed, err := assets.EnsureReport(t.Context(), js, config())
	if err != nil {
		t.Fatalf("EnsureReport: %v", err)
	}
	if len(changed) != 2 || !strings.Contains(strings.Join(changed, "\n"), "stream "+assets.StreamAudit) || !strings.Contains(strings.Join(changed, "\n"), "stream "+assets.StreamRejected) {
		t.Fatalf("changes %q, want the two streams' limits", changed)
	}
	for name, w := range want {
		got := streamConfig(t, js, name)
		if g := [3]int64{int64(got.MaxAge), got.MaxBytes, got.MaxMsgs}; g != w {
			t.Errorf("stream %s after Ensure: %v, want %v", name, g, w)
		}
	}
	if changed, err := assets.EnsureReport(t.Context(), js, config()); err != nil || len(changed) != 0 {
		t.Fatalf("Ensure again: %q, %v; want no change", changed, err)
	}
}
