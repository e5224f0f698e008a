package runner

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The code version comes from the build: a release tag as it is, else the VCS revision
// (12 hex digits, "+dirty" with local changes), within the record's budget.
func TestBuildVersion(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "9bc5be173cdaba455dd8ed5622aa179118f43c2d"
	for _, tc := range []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"a release", "v1.4.0", vcs(rev, "false"), "v1.4.0"},
		{"a release with changes", "v1.4.0+dirty", vcs(rev, "true"), "v1.4.0+dirty"},
		{"a commit after a tag", "v1.4.1-0.20261201224524-9bc5be173cda", vcs(rev, "false"), "9bc5be173cda"},
		{"a pseudo-version with changes", "v0.0.0-20261201224524-9bc5be173cda+dirty", vcs(rev, "true"), "9bc5be173cda+dirty"},
		{"a pseudo-version alone (go install)", "v0.0.0-20261201224524-9bc5be173cda", nil, "9bc5be173cda"},
		{"a worktree build", "(devel)", vcs(rev, "true"), "9bc5be173cda+dirty"},
		{"nothing recorded", "(devel)", nil, "devel"},
		{"a tag too long for the record", "v1.4.0-rc.1+build.20261201.linux", vcs(rev, "false"), "9bc5be173cda"},
	} {
		got := buildVersion(&debug.BuildInfo{Main: debug.Module{Version: tc.version}, Settings: tc.settings})
		if got != tc.want || !codeVersionOK(got) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if codeVersionOK(strings.Repeat("a", 25)) || codeVersionOK("v1\n") {
		t.Error("a code version too long or not printable is accepted")
	}
}
