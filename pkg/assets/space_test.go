package assets

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
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
	// No stream of one space takes a subject another space's streams take.
	other := MustSpace("other")
	spaces := []Space{Default, en, other}
	for _, a := range spaces {
		for _, b := range spaces {
			if a == b {
				continue
			}
			for _, sa := range (Config{Space: a, Steps: []string{"fetch"}}).Streams() {
				for _, sb := range (Config{Space: b, Steps: []string{"fetch"}}).Streams() {
					for _, fa := range sa.Subjects {
						for _, fb := range sb.Subjects {
							if server.SubjectsCollide(fa, fb) {
								t.Errorf("%s's stream %s (%s) and %s's %s (%s) meet", a, sa.Name, fa, b, sb.Name, fb)
							}
						}
					}
				}
			}
		}
	}
}

func TestSpaceOfRefuses(t *testing.T) {
	for _, name := range []string{"", "Enrich", "my-job", "1st", "runs", "natural", "cli", "supervisor", "fetch", "admin", strings.Repeat("a", 33), "a.b", "a*"} {
		if _, err := SpaceOf(name); err == nil {
			t.Errorf("SpaceOf(%q) accepted it", name)
		}
	}
}
