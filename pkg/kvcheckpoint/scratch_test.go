package kvcheckpoint_test

import (
	"strings"
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

func TestScratchSizes(t *testing.T) {
	for _, run := range []string{"run-2026-11-01-ldh", strings.Repeat("r", 64)} {
		r := newRecord(run)
		r.Epoch = "f9512a94"
		for i := 0; i < 16; i++ {
			r.AddRequest("cli-anTZuAAgLg5hNQCERsz5ud")
		}
		t.Logf("%s fresh: size %d room %d", run[:5], must(kc.Size(r)), kc.Room(r))
		for _, name := range pipeline {
			s := r.Step(name)
			s.Status = kc.Verified
			s.StartedAt = kc.Ptr("2026-12-01T19:52:06.555900801Z")
			s.FinishedAt = kc.Ptr("2026-12-01T19:52:06.555900801Z")
			s.Output = &kc.Output{Object: run + "/" + name + "/" + strings.Repeat("a", 64), Digest: "SHA-256=" + strings.Repeat("b", 44), Size: 41230}
			s.InputFingerprint = kc.Ptr("sha256:" + strings.Repeat("c", 64))
			s.Versions = kc.Versions{Code: kc.Ptr("v0.1.0")}
			s.Token = kc.Ptr(uint64(18760))
			s.Effects = &kc.Effects{Keys: 40}
			t.Logf("after %s: size %d room %d steproom-next %d", name, must(kc.Size(r)), kc.Room(r), kc.StepRoom(r, r.Next(name)))
		}
	}
}

func must(n int, err error) int {
	if err != nil {
		panic(err)
	}
	return n
}
