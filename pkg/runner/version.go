package runner

import (
	"regexp"
	"runtime/debug"
	"strings"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// BuildVersion is the version of the running binary's code, as its build recorded it: the
// main module's version when the build was of a release tag ("v1.4.0", "v1.4.0+dirty"),
// otherwise the first 12 hex digits of the VCS revision, "+dirty" when the working tree had
// changes ("9bc5be1abcde+dirty"), and "devel" when the build recorded neither (go test, or a
// build without its VCS directory, which should set Config.CodeVersion itself). It is the
// default of Config.CodeVersion, at most kvcheckpoint.MaxCodeVersion bytes.
func BuildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return develVersion
	}
	return buildVersion(info)
}

const develVersion = "devel"

// pseudo matches the tail of a Go pseudo-version: a timestamp and a 12-digit revision.
var pseudo = regexp.MustCompile(`(^|[-.])\d{14}-([0-9a-f]{12})(\+dirty)?$`)

func buildVersion(info *debug.BuildInfo) string {
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v := info.Main.Version
	if v != "" && v != "(devel)" && !pseudo.MatchString(v) && len(v) <= kc.MaxCodeVersion {
		return v
	}
	if m := pseudo.FindStringSubmatch(v); rev == "" && m != nil {
		rev, dirty = m[2], m[3] != ""
	}
	if rev == "" {
		return develVersion
	}
	v = rev[:min(len(rev), 12)]
	if dirty {
		v += "+dirty"
	}
	return v
}

// codeVersionOK: a code version the record's budget allows, printable.
func codeVersionOK(v string) bool {
	return len(v) <= kc.MaxCodeVersion && !strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r > '~' })
}
