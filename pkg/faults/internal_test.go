package faults

import (
	"context"
	"testing"
	"time"
)

func TestParseRule(t *testing.T) {
	t.Parallel()
	tests := []Fault{
		{Spec: "post-ledger.before-write.24=exit@once", Step: "post-ledger", Point: BeforeWrite, N: 24, Action: "exit", Once: true},
		{Spec: "fetch.before-commit=exit", Step: "fetch", Point: BeforeCommit, Action: "exit"},
		{Spec: "fetch.after-commit=error:temporary", Step: "fetch", Point: AfterCommit, Action: "error", Class: ErrTemporary},
		{Spec: "fetch.after-write.1=error:permanent", Step: "fetch", Point: AfterWrite, N: 1, Action: "error", Class: ErrPermanent},
		{Spec: "fetch.lost-reply=error:unknown@once", Step: "fetch", Point: LostReply, Action: "error", Class: ErrUnknown, Once: true},
		{Spec: "extract.before-next-publish=stall", Step: "extract", Point: BeforeNextPublish, Action: "stall"},
		{Spec: "extract.after-write.3=stall:2s", Step: "extract", Point: AfterWrite, N: 3, Action: "stall", Stall: 2 * time.Second},
		{Spec: "extract.after-write=stall:150ms@once", Step: "extract", Point: AfterWrite, Action: "stall", Stall: 150 * time.Millisecond, Once: true},
	}
	for _, want := range tests {
		s, err := Parse(want.Spec, t.TempDir())
		if err != nil {
			t.Errorf("Parse(%q): %v", want.Spec, err)
			continue
		}
		if len(s.faults) != 1 {
			t.Errorf("Parse(%q) made %d faults, want 1", want.Spec, len(s.faults))
			continue
		}
		if got := s.faults[0]; got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", want.Spec, got, want)
		}
	}
}

func TestExitOnceWritesMarkerFirst(t *testing.T) {
	t.Parallel()
	const rule = "post-ledger.before-write.24=exit@once"
	dir := t.TempDir()
	s, err := Parse(rule, dir)
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	markerAtExit := false
	s.exit = func(code int) {
		codes = append(codes, code)
		markerAtExit = Fired(dir, rule)
	}
	ctx := context.Background()
	if err := s.Hit(ctx, "post-ledger", BeforeWrite, 23); err != nil {
		t.Fatalf("Hit at write 23 = %v", err)
	}
	if len(codes) != 0 {
		t.Fatalf("exit called at write 23: %v", codes)
	}
	// In production exit never returns; here it does, and Hit carries on.
	_ = s.Hit(ctx, "post-ledger", BeforeWrite, 24)
	if len(codes) != 1 || codes[0] != ExitCode || ExitCode != 3 {
		t.Fatalf("exit codes = %v, want [3]", codes)
	}
	if !markerAtExit {
		t.Fatal("the @once marker was not written before exit")
	}
	// After the restart the fault does not fire again.
	_ = s.Hit(ctx, "post-ledger", BeforeWrite, 24)
	if len(codes) != 1 {
		t.Fatalf("exit called again after the marker: %v", codes)
	}
}

func TestExitWithoutOnceEveryTime(t *testing.T) {
	t.Parallel()
	s, err := Parse("fetch.after-commit=exit", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	s.exit = func(code int) { codes = append(codes, code) }
	_ = s.Hit(context.Background(), "fetch", AfterCommit, 0)
	_ = s.Hit(context.Background(), "fetch", AfterCommit, 0)
	if len(codes) != 2 || codes[0] != 3 || codes[1] != 3 {
		t.Fatalf("exit codes = %v, want [3 3]", codes)
	}
}

func TestParseDefaultsToOSExit(t *testing.T) {
	t.Parallel()
	s, err := Parse("fetch.after-commit=exit", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if s.exit == nil {
		t.Fatal("Parse left exit nil")
	}
}
