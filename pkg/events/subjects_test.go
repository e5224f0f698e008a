package events

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnhq/cairn/pkg/assets"
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		StepSubject("post-ledger", testRun):                                "cairn.step.post-ledger.run-2026-10-13-ldh",
		RunSubject(testRun, VerbApprove):                                   "cairn.runs.run-2026-10-13-ldh.approve",
		AuditSubject(testRun):                                              "cairn.audit.run-2026-10-13-ldh",
		SagaSubject(testRun, "update-stock"):                               "cairn.saga.run-2026-10-13-ldh.update-stock",
		OutboxSubject(testRun, "debit"):                                    "cairn.outbox.run-2026-10-13-ldh.debit",
		StepReadyID(testRun, "fetch", 12):                                  "run-2026-10-13-ldh:fetch:ready:12",
		AuditStepID(testRun, "fetch", "v", 3):                              "run-2026-10-13-ldh:fetch:v:3",
		RejectedID("CAIRN_RUNS", 77):                                       "CAIRN_RUNS:77",
		AuditItemID(testRun, "extract", "extractor.called", 9, "INV-1", 2): "run-2026-10-13-ldh:extract:extractor.called:9:INV-1:2",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestParseRunSubject(t *testing.T) {
	t.Parallel()
	good := []struct{ subject, run, verb string }{
		{"cairn.runs.start", "", "start"},
		{"cairn.runs.run-1.resume", "run-1", "resume"},
		{"cairn.runs.run-1.approve", "run-1", "approve"},
		{"cairn.runs.run-1.reject", "run-1", "reject"},
		{"cairn.runs.run-1.cancel", "run-1", "cancel"},
		{"cairn.runs.run-1.rerun", "run-1", "rerun"},
		{"cairn.runs.run-1.undo", "run-1", "undo"},
		{"cairn.runs.start.cancel", "start", "cancel"},
	}
	for _, tc := range good {
		run, verb, err := ParseRunSubject(assets.Default, tc.subject)
		if err != nil || run != tc.run || verb != tc.verb {
			t.Errorf("ParseRunSubject(assets.Default, %q) = %q, %q, %v; want %q, %q", tc.subject, run, verb, err, tc.run, tc.verb)
		}
	}
	bad := []string{
		"", "cairn.runs", "cairn.runs.", "cairn.runs.run-1", "cairn.runs.run-1.start", "cairn.runs.run-1.explode",
		"cairn.runs.a.b.approve", "cairn.runs.*.approve", "cairn.runs.>", "cairn.step.fetch.run-1",
		"cairn.runs..approve", "cairn.runs.run-1.approve.", "cairn.runs.start.",
	}
	for _, s := range bad {
		_, _, err := ParseRunSubject(assets.Default, s)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "subject "+quote(s)) {
			t.Errorf("ParseRunSubject(assets.Default, %q) err = %v, want ErrInvalid naming the subject", s, err)
		}
	}
}

func quote(s string) string { return strconv.Quote(s) }

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "run-2026-10-13-ldh", "A_b-9", strings.Repeat("x", 64)} {
		if err := ValidID("run_id", ok); err != nil {
			t.Errorf("ValidID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a:b", "a b", "é", strings.Repeat("x", 65), "a\n"} {
		err := ValidID("run_id", bad)
		if !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), "run_id") {
			t.Errorf("ValidID(%q) = %v, want ErrInvalidID naming run_id", bad, err)
		}
		if bad != "" && !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ValidID(%q) = %v, want it to quote the value", bad, err)
		}
	}
}
