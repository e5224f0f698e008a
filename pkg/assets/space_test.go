package assets

import (
	"strings"
	"testing"
)

// The default space keeps DESIGN.md's names; a pipeline's space carries its name in every
// one, and no two spaces' stream subjects meet.
func TestSpaceNames(t *testing.T) {
	en := MustSpace("enrich")
	for _, c := range []struct{ got, want string }{
		{Default.Stream(StreamRuns), "CAIRN_RUNS"},
		{Default.Bucket(BucketNaturalKeys), "cairn-natural-keys"},
		{Default.RunStart(), "cairn.runs.start"},
		{Default.Step("fetch", "r1"), "cairn.step.fetch.r1"},
		{Default.Run("r1", "undo"), "cairn.runs.r1.undo"},
		{Default.Audit("r1"), "cairn.audit.r1"},
		{Default.Saga("r1", "post-ledger"), "cairn.saga.r1.post-ledger"},
		{Default.Outbox("r1", "debit-note"), "cairn.outbox.r1.debit-note"},
		{Default.Rejected(), "cairn.rejected"},
		{en.Stream(StreamSteps), "CAIRN_ENRICH_STEPS"},
		{en.Bucket(BucketRuns), "cairn-enrich-runs"},
		{en.Bucket(ObjectArtifacts), "cairn-enrich-artifacts"},
		{en.RunStart(), "cairn.enrich.runs.start"},
		{en.Step("fetch", "r1"), "cairn.enrich.step.fetch.r1"},
		{en.Rejected(), "cairn.enrich.rejected"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
	// A stream subject of one space never matches a subject of another's.
	other := MustSpace("other")
	for _, a := range []Space{Default, en, other} {
		for _, st := range (Config{Space: a, Steps: []string{"fetch"}}).Streams() {
			for _, b := range []Space{Default, en, other} {
				if a == b {
					continue
				}
				for _, subj := range []string{b.RunStart(), b.Run("r1", "resume"), b.Step("fetch", "r1"), b.Audit("r1"), b.Saga("r1", "fetch"), b.Outbox("r1", "k"), b.Rejected()} {
					for _, filter := range st.Subjects {
						if matches(filter, subj) {
							t.Errorf("%s's stream %s (%s) takes %s's subject %s", a, st.Name, filter, b, subj)
						}
					}
				}
			}
		}
	}
}

func TestSpaceOfRefuses(t *testing.T) {
	for _, name := range []string{"", "Enrich", "my-job", "1st", "runs", "natural", strings.Repeat("a", 33), "a.b", "a*"} {
		if _, err := SpaceOf(name); err == nil {
			t.Errorf("SpaceOf(%q) accepted it", name)
		}
	}
}

// matches is NATS subject matching of filter (with * and >) against a literal subject.
func matches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}
